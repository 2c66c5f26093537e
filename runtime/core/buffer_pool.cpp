// Recycling of large tensor buffers. Declared in
// runtime/core/buffer_pool.hpp.
#include "actorflow/runtime/core/buffer_pool.hpp"

#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace af::buffer_pool {

namespace {

constexpr std::align_val_t alignment{64};

struct pool {
  std::mutex mtx;
  size_t limit = size_t{256} << 20;
  size_t bytes = 0;
  std::unordered_map<size_t, std::vector<void*>> free;

  // Frees kept blocks until `bytes` fits the limit. Caller holds mtx.
  void shrink() {
    for (auto it = free.begin(); it != free.end() && bytes > limit;) {
      auto& blocks = it->second;
      while (!blocks.empty() && bytes > limit) {
        ::operator delete[](blocks.back(), alignment);
        blocks.pop_back();
        bytes -= it->first;
      }
      it = blocks.empty() ? free.erase(it) : std::next(it);
    }
  }

  ~pool() {
    limit = 0;
    shrink();
  }
};

pool& instance() {
  static pool p;
  return p;
}

} // namespace

void* take(size_t size) noexcept {
  if (size < min_pooled_bytes)
    return nullptr;
  auto& p = instance();
  std::lock_guard<std::mutex> guard{p.mtx};
  auto it = p.free.find(size);
  if (it == p.free.end() || it->second.empty())
    return nullptr;
  auto* block = it->second.back();
  it->second.pop_back();
  p.bytes -= size;
  return block;
}

bool give(void* block, size_t size) noexcept {
  if (size < min_pooled_bytes || block == nullptr)
    return false;
  auto& p = instance();
  std::lock_guard<std::mutex> guard{p.mtx};
  if (p.bytes + size > p.limit)
    return false;
  try {
    p.free[size].push_back(block);
  } catch (...) {
    return false;
  }
  p.bytes += size;
  return true;
}

void set_limit(size_t bytes) {
  auto& p = instance();
  std::lock_guard<std::mutex> guard{p.mtx};
  p.limit = bytes;
  p.shrink();
}

size_t limit() noexcept {
  auto& p = instance();
  std::lock_guard<std::mutex> guard{p.mtx};
  return p.limit;
}

size_t pooled_bytes() noexcept {
  auto& p = instance();
  std::lock_guard<std::mutex> guard{p.mtx};
  return p.bytes;
}

} // namespace af::buffer_pool
