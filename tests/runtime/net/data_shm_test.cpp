// Shared memory between the two processes of a data connection
// (runtime/net/detail/data_shm.hpp): the sender's region and the receiver's map of it,
// here both in one process, over one memfd, as two processes would see it.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "actorflow/runtime/core/tensor.hpp"
#include "actorflow/runtime/net/detail/data_shm.hpp"

using namespace af;
namespace shm = af::data_shm;

namespace {

std::vector<char> pattern(size_t n, char seed) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<char>(seed + static_cast<char>(i * 7));
  return v;
}

struct pair_fixture {
  std::shared_ptr<shm::outbound> out;
  std::shared_ptr<shm::inbound> in;
  explicit pair_fixture(size_t bytes = shm::min_region) {
    std::string why;
    out = shm::outbound::make(bytes, why);
    REQUIRE(out);
    REQUIRE(why.empty());
    // What the peer gets over SCM_RIGHTS: its own descriptor of the memfd.
    in = shm::inbound::map(::dup(out->fd()), out->size(), why);
    REQUIRE(in);
  }
  std::vector<shm::block_ref> place(std::vector<std::vector<char>>& blocks) {
    std::vector<iovec> iov;
    for (auto& b : blocks)
      iov.push_back(iovec{b.data(), b.size()});
    std::vector<shm::block_ref> refs;
    REQUIRE(out->place(iov, refs));
    REQUIRE(refs.size() == blocks.size());
    return refs;
  }
};

} // namespace

TEST_CASE("a block reference crosses as 16 bytes", "[data_shm]") {
  shm::block_ref r{0x1122334455667788, 4096};
  std::byte raw[shm::ref_size];
  shm::encode(r, raw);
  CHECK(std::to_integer<int>(raw[0]) == 0x88);
  auto back = shm::decode_ref(raw);
  CHECK(back.offset == r.offset);
  CHECK(back.bytes == r.bytes);
}

TEST_CASE("the receiver's buffer is the sender's block, in place, until it "
          "goes",
          "[data_shm]") {
  pair_fixture p;
  std::vector<std::vector<char>> blocks{pattern(5000, 1), pattern(70000, 2)};
  auto refs = p.place(blocks);
  CHECK(refs[0].offset % shm::align == 0);
  CHECK(refs[1].offset % shm::align == 0);
  std::string why;
  auto a = p.in->adopt(refs[0], 5000, why);
  REQUIRE(a);
  auto b = p.in->adopt(refs[1], 70000, why);
  REQUIRE(b);
  CHECK(std::memcmp(a->data(), blocks[0].data(), 5000) == 0);
  CHECK(std::memcmp(b->data(), blocks[1].data(), 70000) == 0);
  CHECK(reinterpret_cast<uintptr_t>(a->data()) % 64 == 0);
  // Held while the buffers live, given back when they go: not copied.
  auto both = p.out->held();
  CHECK(both >= 5000 + 70000 + 2 * shm::align);
  a.reset();
  CHECK(p.out->held() < both);
  CHECK(p.out->held() > 0);
  b.reset();
  CHECK(p.out->held() == 0);
}

TEST_CASE("a tensor over a block outlives the sender's region", "[data_shm]") {
  pair_fixture p;
  std::vector<std::vector<char>> blocks{pattern(8192, 3)};
  auto refs = p.place(blocks);
  std::string why;
  auto buf = p.in->adopt(refs[0], 8192, why);
  REQUIRE(buf);
  tensor t{dtype::u8, {8192}, buf};
  p.out.reset(); // the connection, and the sender with it, is gone
  p.in.reset();  // and so is the receiver's connection
  CHECK(std::memcmp(t.data(), blocks[0].data(), 8192) == 0);
}

TEST_CASE("a region that is full takes nothing, and given-back blocks are used "
          "again",
          "[data_shm]") {
  pair_fixture p; // 1 MiB
  std::vector<std::vector<char>> half{pattern(400 << 10, 4),
                                      pattern(400 << 10, 5)};
  auto refs = p.place(half);
  std::string why;
  auto a = p.in->adopt(refs[0], half[0].size(), why);
  auto b = p.in->adopt(refs[1], half[1].size(), why);
  REQUIRE(a);
  REQUIRE(b);
  // About 220 KiB are left: 100 KiB would fit, 100 + 200 KiB do not, and
  // neither block is taken.
  std::vector<std::vector<char>> more{pattern(100 << 10, 6),
                                      pattern(200 << 10, 7)};
  std::vector<iovec> iov{iovec{more[0].data(), more[0].size()},
                         iovec{more[1].data(), more[1].size()}};
  std::vector<shm::block_ref> refs2;
  auto before = p.out->held();
  CHECK_FALSE(p.out->place(iov, refs2));
  CHECK(p.out->held() == before);
  // One block back: both fit again, in the space it left.
  a.reset();
  REQUIRE(p.out->place(iov, refs2));
  CHECK(refs2[0].offset == refs[0].offset);
  // Many rounds through a small region, each given back: never full.
  b.reset();
  for (int round = 0; round < 100; ++round) {
    std::vector<std::vector<char>> one{pattern(300 << 10, 8)};
    auto r = p.place(one);
    auto x = p.in->adopt(r[0], one[0].size(), why);
    REQUIRE(x);
    CHECK(std::memcmp(x->data(), one[0].data(), one[0].size()) == 0);
  }
}

TEST_CASE("a buffer allocated in the region is sent in place once, and its "
          "block comes back when both sides let go",
          "[data_shm]") {
  pair_fixture p; // 1 MiB
  auto bytes = size_t{300} << 10;
  auto buf = shm::outbound::allocate(p.out, bytes);
  REQUIRE(buf);
  auto want = pattern(bytes, 9);
  std::memcpy(buf->data(), want.data(), bytes);
  CHECK(p.out->held() >= bytes);
  // Sent: the reference names the buffer's own bytes (no copy), and the
  // receiver reads what was written there.
  std::vector<iovec> iov{iovec{buf->data(), bytes}};
  std::vector<shm::block_ref> refs;
  REQUIRE(p.out->place(iov, refs));
  std::string why;
  auto got = p.in->adopt(refs[0], bytes, why);
  REQUIRE(got);
  CHECK(std::memcmp(got->data(), want.data(), bytes) == 0);
  // In place: the receiver's bytes are the sender's buffer.
  buf->data()[7] = std::byte{0x77};
  CHECK(std::to_integer<int>(got->data()[7]) == 0x77);
  want[7] = 0x77;
  // Sent again (a request sent again): copied, into another block.
  std::vector<shm::block_ref> again;
  REQUIRE(p.out->place(iov, again));
  CHECK(again[0].offset != refs[0].offset);
  auto copy = p.in->adopt(again[0], bytes, why);
  REQUIRE(copy);
  CHECK(std::memcmp(copy->data(), want.data(), bytes) == 0);
  copy.reset();
  // The receiver lets go of the block sent in place; the sender's buffer
  // over it still lives, so it stays taken: of the 1 MiB, room for two
  // more such blocks, not three.
  auto before = p.out->held();
  got.reset();
  CHECK(p.out->held() == before);
  CHECK(std::memcmp(buf->data(), want.data(), bytes) == 0);
  auto second = shm::outbound::allocate(p.out, bytes);
  auto third = shm::outbound::allocate(p.out, bytes);
  auto fourth = shm::outbound::allocate(p.out, bytes);
  REQUIRE(second);
  REQUIRE(third);
  CHECK_FALSE(fourth);
  CHECK(second->data() != buf->data());
  CHECK(third->data() != buf->data());
  // The sender's buffer goes too: its block is free again.
  buf.reset();
  fourth = shm::outbound::allocate(p.out, bytes);
  REQUIRE(fourth);
  // A buffer never sent goes back at once when it goes.
  auto held = p.out->held();
  second.reset();
  CHECK(p.out->held() == held - (bytes + shm::align));
  // A buffer keeps the region mapped after its connection is gone.
  std::memset(third->data(), 0x5a, bytes);
  p.out.reset();
  p.in.reset();
  CHECK(std::to_integer<int>(third->data()[bytes - 1]) == 0x5a);
}

TEST_CASE("a part of an allocated buffer, or a buffer of another region, is "
          "copied",
          "[data_shm]") {
  pair_fixture p;
  pair_fixture other;
  auto buf = shm::outbound::allocate(p.out, 8192);
  auto foreign = shm::outbound::allocate(other.out, 8192);
  REQUIRE(buf);
  REQUIRE(foreign);
  std::vector<iovec> iov{iovec{buf->data(), 4096},
                         iovec{foreign->data(), 8192}};
  std::vector<shm::block_ref> refs;
  REQUIRE(p.out->place(iov, refs));
  std::string why;
  auto part = p.in->adopt(refs[0], 4096, why);
  auto copied = p.in->adopt(refs[1], 8192, why);
  REQUIRE(part);
  REQUIRE(copied);
  // Copies: what the sender writes now does not show there.
  buf->data()[0] = std::byte{1};
  foreign->data()[0] = std::byte{1};
  CHECK(std::to_integer<int>(part->data()[0]) == 0);
  CHECK(std::to_integer<int>(copied->data()[0]) == 0);
  // Neither was sent in place: the whole buffer still goes in place once,
  // and then the receiver's bytes are the sender's.
  std::vector<iovec> whole{iovec{buf->data(), 8192}};
  std::vector<shm::block_ref> in_place;
  REQUIRE(p.out->place(whole, in_place));
  auto same = p.in->adopt(in_place[0], 8192, why);
  REQUIRE(same);
  CHECK(std::to_integer<int>(same->data()[0]) == 1);
  buf->data()[1] = std::byte{2};
  CHECK(std::to_integer<int>(same->data()[1]) == 2);
  // Twice in one message: the first in place, the second copied.
  auto fresh = shm::outbound::allocate(p.out, 8192);
  REQUIRE(fresh);
  std::vector<iovec> twice{iovec{fresh->data(), 8192},
                           iovec{fresh->data(), 8192}};
  std::vector<shm::block_ref> both;
  REQUIRE(p.out->place(twice, both));
  CHECK(both[0].offset != both[1].offset);
  auto first = p.in->adopt(both[0], 8192, why);
  auto second = p.in->adopt(both[1], 8192, why);
  REQUIRE(first);
  REQUIRE(second);
  fresh->data()[0] = std::byte{3};
  CHECK(std::to_integer<int>(first->data()[0]) == 3);
  CHECK(std::to_integer<int>(second->data()[0]) == 0);
}

TEST_CASE("a reference that does not name a handed-over block is refused",
          "[data_shm]") {
  pair_fixture p;
  std::vector<std::vector<char>> blocks{pattern(4096, 9)};
  auto refs = p.place(blocks);
  std::string why;
  SECTION("a block read twice") {
    REQUIRE(p.in->adopt(refs[0], 4096, why));
    CHECK_FALSE(p.in->adopt(refs[0], 4096, why));
    CHECK(why.find("not handed over") != std::string::npos);
  }
  SECTION("the wrong size") {
    CHECK_FALSE(p.in->adopt(refs[0], 4097, why));
    CHECK(why.find("where the tensor has 4097 bytes") != std::string::npos);
  }
  SECTION("outside the region") {
    auto r = refs[0];
    r.offset = p.out->size() - 64;
    r.bytes = 4096;
    CHECK_FALSE(p.in->adopt(r, 4096, why));
    CHECK(why.find("outside the region") != std::string::npos);
    r.offset = ~uint64_t{0} - 63; // wraps around when added
    std::vector<char> into(4096);
    CHECK(p.in->copy_out(r, into.data(), 4096).find("outside the region")
          != std::string::npos);
  }
  SECTION("not at a block") {
    auto r = refs[0];
    r.offset += 8;
    CHECK_FALSE(p.in->adopt(r, 4096, why));
    CHECK(why.find("not at a block") != std::string::npos);
  }
  SECTION("copied out, the block is given back at once") {
    std::vector<char> into(4096);
    CHECK(p.in->copy_out(refs[0], into.data(), 4096).empty());
    CHECK(into == blocks[0]);
    CHECK(p.out->held() == 0);
  }
}

TEST_CASE("only a sealed memfd of the announced size is mapped", "[data_shm]") {
  std::string why;
  SECTION("a memfd that can still shrink") {
    int fd = ::memfd_create("test", MFD_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, shm::min_region) == 0);
    CHECK_FALSE(shm::inbound::map(fd, shm::min_region, why));
    CHECK(why == "the region is not sealed at its size");
  }
  SECTION("another size than announced") {
    auto out = shm::outbound::make(shm::min_region, why);
    REQUIRE(out);
    CHECK_FALSE(shm::inbound::map(::dup(out->fd()), 2 * shm::min_region, why));
    CHECK(why.find("announced as") != std::string::npos);
  }
  SECTION("not a memfd") {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    ::close(fds[1]);
    CHECK_FALSE(shm::inbound::map(fds[0], shm::min_region, why));
    CHECK(why == "the region is not a memfd");
  }
}

TEST_CASE("senders on several threads never hand out one block twice",
          "[data_shm]") {
  // Two shards answering on one connection: place() from two threads,
  // while the receiver takes and drops blocks on a third. A block that a
  // sender took back and handed out again before the first sender marked
  // it would be named twice (the receiver's take() refuses the second)
  // or overwritten under the first tensor.
  pair_fixture p{size_t{4} << 20};
  std::mutex mtx;
  std::vector<std::pair<shm::block_ref, char>> sent;
  std::atomic<int> refused{0}, corrupt{0};
  std::atomic<bool> done{false};
  auto sender = [&](char seed) {
    for (int i = 0; i < 20000; ++i) {
      auto bytes = pattern(4096 + 64 * (i % 37), seed);
      std::vector<iovec> iov{iovec{bytes.data(), bytes.size()}};
      std::vector<shm::block_ref> refs;
      if (!p.out->place(iov, refs))
        continue; // full for now: the receiver is behind
      std::lock_guard<std::mutex> g(mtx);
      sent.emplace_back(refs[0], seed);
    }
  };
  std::thread receiver([&] {
    for (;;) {
      // Read `done` before taking what was sent: what a sender added
      // before it ended is then in this batch or an earlier one. (Read
      // after, a batch taken empty just before the last senders' blocks
      // came left those blocks unreceived, and held() above 0.)
      bool last = done.load();
      std::vector<std::pair<shm::block_ref, char>> batch;
      {
        std::lock_guard<std::mutex> g(mtx);
        batch.swap(sent);
      }
      if (batch.empty() && last)
        break;
      for (auto& [r, seed] : batch) {
        std::string why;
        auto buf = p.in->adopt(r, r.bytes, why);
        if (!buf) {
          ++refused;
          continue;
        }
        auto want = pattern(r.bytes, seed);
        if (std::memcmp(buf->data(), want.data(), r.bytes) != 0)
          ++corrupt;
      }
    }
  });
  std::thread a(sender, 'a');
  std::thread b(sender, 'b');
  a.join();
  b.join();
  done = true;
  receiver.join();
  CHECK(refused.load() == 0);
  CHECK(corrupt.load() == 0);
  CHECK(p.out->held() == 0);
}
