// Shared memory between the two processes of a data connection
// (runtime/net/detail/data_shm.hpp).
#include "actorflow/runtime/net/detail/data_shm.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "actorflow/runtime/core/tensor.hpp"

namespace af::data_shm {

namespace {

// The first 64 bytes of a region.
struct region_head {
  uint32_t magic;
  uint32_t version;
  uint64_t bytes;
};

// The 64 bytes before each block's bytes. `state` is shared by the two
// processes: lock-free atomics are address-free, so each may map the
// region where it likes.
struct alignas(align) block_head {
  std::atomic<uint32_t> state; // one of the four below
  uint32_t reserved;
  uint64_t bytes; // of the block's bytes, as sent
};
static_assert(sizeof(block_head) == align);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

constexpr uint32_t given_back = 0; // the sender's to allocate
constexpr uint32_t in_use = 1;     // sent, not yet read by the receiver
constexpr uint32_t taken = 2;      // read: a tensor is over it
constexpr uint32_t filling = 3;    // allocated, its bytes being copied

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

void put64(std::byte* p, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    p[i] = static_cast<std::byte>(v >> (8 * i));
}
uint64_t get64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<uint64_t>(std::to_integer<uint8_t>(p[i])) << (8 * i);
  return v;
}

block_head* head_of(std::byte* base, size_t data_offset) {
  return reinterpret_cast<block_head*>(base + data_offset - align);
}

} // namespace

void encode(const block_ref& r, std::byte* out) {
  put64(out, r.offset);
  put64(out + 8, r.bytes);
}

block_ref decode_ref(const std::byte* in) {
  return block_ref{get64(in), get64(in + 8)};
}

void encode_region(uint64_t bytes, std::byte* out) {
  put64(out, bytes);
}

uint64_t decode_region(const std::byte* in) {
  return get64(in);
}

// --- outbound ----------------------------------------------------------------

std::unique_ptr<outbound> outbound::make(size_t bytes, std::string& why) {
  auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  bytes = round_up(std::max(bytes, min_region), page);
  int fd = ::memfd_create("actorflow-data", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    why = std::string{"memfd_create: "} + std::strerror(errno);
    return nullptr;
  }
  // Sealed at its size: the receiver's map can never lose pages under it
  // (a shrunk memfd would end the receiver with SIGBUS).
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0
      || ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
           != 0) {
    why = std::string{"sizing the region: "} + std::strerror(errno);
    ::close(fd);
    return nullptr;
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    why = std::string{"mapping the region: "} + std::strerror(errno);
    ::close(fd);
    return nullptr;
  }
  auto* base = static_cast<std::byte*>(p);
  auto* head = reinterpret_cast<region_head*>(base);
  head->magic = region_magic;
  head->version = region_version;
  head->bytes = bytes;
  return std::unique_ptr<outbound>(new outbound(fd, base, bytes));
}

outbound::outbound(int fd, std::byte* base, size_t size)
  : fd_(fd), base_(base), size_(size) {
  free_.emplace(align, size - align);
}

outbound::~outbound() {
  ::munmap(base_, size_);
  ::close(fd_);
}

size_t outbound::held() {
  std::lock_guard<std::mutex> g(mtx_);
  reclaim();
  return held_;
}

void outbound::give_back(size_t at, size_t len) {
  auto next = free_.lower_bound(at);
  if (next != free_.end() && at + len == next->first) {
    len += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == at) {
      prev->second += len;
      return;
    }
  }
  free_.emplace(at, len);
}

void outbound::reclaim() {
  auto keep = sent_.begin();
  for (auto& b : sent_) {
    auto* h = reinterpret_cast<block_head*>(base_ + b.first);
    // (A block whose buffer still lives here stays the caller's.)
    if (h->state.load(std::memory_order_acquire) == given_back
        && local_.count(b.first) == 0) {
      give_back(b.first, b.second);
      held_ -= b.second;
    } else {
      *keep++ = b;
    }
  }
  sent_.erase(keep, sent_.end());
}

bool outbound::take_free(size_t need, size_t& at) {
  // First fit from the region's start: what is in use stays at the front,
  // and pages at the back are touched only when needed.
  auto it = free_.begin();
  while (it != free_.end() && it->second < need)
    ++it;
  if (it == free_.end())
    return false;
  at = it->first;
  auto len = it->second;
  free_.erase(it);
  if (len > need)
    free_.emplace(at + need, len - need);
  return true;
}

bool outbound::place(const std::vector<iovec>& blocks,
                     std::vector<block_ref>& refs) {
  // Per block: where it goes, and whether it is there already (a buffer
  // of allocate(), sent in place).
  std::vector<std::pair<size_t, size_t>> got;
  std::vector<bool> in_place(blocks.size(), false);
  {
    std::lock_guard<std::mutex> g(mtx_);
    reclaim();
    for (size_t i = 0; i < blocks.size(); ++i) {
      auto& b = blocks[i];
      auto* p = static_cast<std::byte*>(b.iov_base);
      if (p >= base_ + 2 * align && p < base_ + size_) {
        auto at = static_cast<size_t>(p - base_) - align;
        auto it = local_.find(at);
        if (it != local_.end() && !it->second.second
            && head_of(base_, at + align)->bytes == b.iov_len
            && std::none_of(got.begin(), got.end(),
                            [&](auto& t) { return t.first == at; })) {
          got.emplace_back(at, it->second.first);
          in_place[i] = true;
          continue;
        }
      }
      auto need = align + round_up(b.iov_len, align);
      size_t at = 0;
      if (!take_free(need, at)) {
        for (size_t j = 0; j < got.size(); ++j)
          if (!in_place[j])
            give_back(got[j].first, got[j].second);
        return false;
      }
      got.emplace_back(at, need);
    }
    // Marked under the lock: another sender's reclaim() must not take a
    // block that is in sent_ but still says given_back (from its last
    // use, or never used) and hand it out a second time.
    for (size_t i = 0; i < got.size(); ++i) {
      sent_.push_back(got[i]);
      if (in_place[i]) { // held_ counted it when it was allocated
        local_[got[i].first].second = true;
        continue;
      }
      auto* h = reinterpret_cast<block_head*>(base_ + got[i].first);
      h->reserved = 0;
      h->bytes = blocks[i].iov_len;
      h->state.store(filling, std::memory_order_relaxed);
      held_ += got[i].second;
    }
  }
  // The blocks are this thread's until their references go out.
  refs.clear();
  for (size_t i = 0; i < blocks.size(); ++i) {
    auto at = got[i].first;
    if (!in_place[i])
      std::memcpy(base_ + at + align, blocks[i].iov_base, blocks[i].iov_len);
    // Release: the receiver's take() (acquire) that sees in_use sees the
    // bytes too.
    reinterpret_cast<block_head*>(base_ + at)
      ->state.store(in_use, std::memory_order_release);
    refs.push_back(block_ref{at + align, blocks[i].iov_len});
  }
  return true;
}

std::shared_ptr<buffer> outbound::allocate(const std::shared_ptr<outbound>& self,
                                           size_t bytes) {
  if (!self || bytes == 0)
    return nullptr;
  auto need = align + round_up(bytes, align);
  size_t at = 0;
  {
    std::lock_guard<std::mutex> g(self->mtx_);
    self->reclaim();
    if (!self->take_free(need, at))
      return nullptr;
    auto* h = reinterpret_cast<block_head*>(self->base_ + at);
    h->reserved = 0;
    h->bytes = bytes;
    h->state.store(filling, std::memory_order_relaxed);
    self->local_.emplace(at, std::make_pair(need, false));
    self->held_ += need;
  }
  // The owner keeps the region mapped and gives the block back when the
  // buffer goes. (Not null: a buffer without an owner frees its bytes.)
  std::shared_ptr<void> owner(self.get(),
                              [self, at](void*) { self->let_go(at); });
  return std::make_shared<buffer>(self->base_ + at + align, bytes,
                                  std::move(owner));
}

void outbound::let_go(size_t at) {
  std::lock_guard<std::mutex> g(mtx_);
  auto it = local_.find(at);
  if (it == local_.end())
    return;
  auto [len, sent] = it->second;
  local_.erase(it);
  if (!sent) { // never went out: free now
    give_back(at, len);
    held_ -= len;
  } // else reclaim() takes it back once the receiver let go too
}

// --- inbound -----------------------------------------------------------------

std::shared_ptr<inbound> inbound::map(int fd, uint64_t bytes,
                                      std::string& why) {
  struct stat st {};
  int seals = ::fcntl(fd, F_GET_SEALS);
  constexpr int need = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
  if (::fstat(fd, &st) != 0 || seals < 0) {
    why = "the region is not a memfd";
    ::close(fd);
    return nullptr;
  }
  if ((seals & need) != need) {
    why = "the region is not sealed at its size";
    ::close(fd);
    return nullptr;
  }
  if (bytes < min_region || bytes > max_region
      || static_cast<uint64_t>(st.st_size) != bytes) {
    why = "a region of " + std::to_string(st.st_size) + " bytes announced as "
          + std::to_string(bytes);
    ::close(fd);
    return nullptr;
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    why = std::string{"cannot map the region: "} + std::strerror(errno);
    return nullptr;
  }
  auto* base = static_cast<std::byte*>(p);
  auto* head = reinterpret_cast<const region_head*>(base);
  if (head->magic != region_magic || head->version != region_version
      || head->bytes != bytes) {
    ::munmap(p, bytes);
    why = "the region has no region head";
    return nullptr;
  }
  return std::shared_ptr<inbound>(new inbound(base, bytes));
}

inbound::~inbound() {
  ::munmap(base_, size_);
}

std::string inbound::take(const block_ref& r, size_t n) {
  auto bad = [&](const char* what) {
    return std::string{"a block reference "} + what + " (offset "
           + std::to_string(r.offset) + ", " + std::to_string(r.bytes)
           + " bytes, region of " + std::to_string(size_) + ")";
  };
  if (r.bytes != n)
    return bad(
      ("where the tensor has " + std::to_string(n) + " bytes").c_str());
  if (r.offset % align != 0 || r.offset < 2 * align)
    return bad("not at a block");
  if (r.offset > size_ || r.bytes > size_ - r.offset)
    return bad("outside the region");
  // Each reference takes its block once: a block named twice would be two
  // tensors, and the first to go would hand back the other's bytes.
  auto* h = head_of(base_, r.offset);
  auto expected = in_use;
  if (h->bytes != r.bytes
      || !h->state.compare_exchange_strong(expected, taken,
                                           std::memory_order_acquire))
    return bad("to a block that was not handed over");
  return {};
}

std::shared_ptr<const buffer> inbound::adopt(const block_ref& r, size_t n,
                                             std::string& why) {
  why = take(r, n);
  if (!why.empty())
    return nullptr;
  auto* h = head_of(base_, r.offset);
  // The owner gives the block back and keeps the map while the buffer
  // lives, even after the connection is gone.
  std::shared_ptr<void> owner(h, [self = shared_from_this()](void* p) {
    static_cast<block_head*>(p)->state.store(given_back,
                                             std::memory_order_release);
  });
  return std::make_shared<buffer>(base_ + r.offset, n, std::move(owner));
}

std::string inbound::copy_out(const block_ref& r, void* into, size_t n) {
  if (auto why = take(r, n); !why.empty())
    return why;
  std::memcpy(into, base_ + r.offset, n);
  head_of(base_, r.offset)->state.store(given_back, std::memory_order_release);
  return {};
}

} // namespace af::data_shm
