// Internal to the data plane (runtime/net/data_plane.hpp), not installed: shared
// memory between two processes of one machine that share a data connection
// over a Unix socket.
//
// Each side of such a connection makes a region (a memfd, sealed at its
// size) for what it sends, and hands the peer its file descriptor on the
// socket (SCM_RIGHTS, in a `region` frame, runtime/net/detail/data_frame.hpp). A
// tensor's bytes then go once, from the tensor into a block of the
// sender's region; the frame on the socket carries only where the block
// is (`block_ref`), and the receiver's tensor is that block, in place: no
// copy on the receiving side, and none in the kernel.
//
// Region layout (every offset a multiple of 64):
//
//   0     region head: magic "AFSM", version, bytes
//   64    block: 64-byte block head, then the block's bytes, padded to 64
//   ...   more blocks
//
// A block head's `state` is 3 while the sender fills the block and 1 once
// it is the receiver's (set, with release, before the reference goes
// out); the receiver makes it 2 when it reads the reference (so a block is
// read once) and 0 when the last tensor over the block is gone. Only the
// sender allocates: it takes back, before it allocates, every block it
// sent whose state is 0. A tensor held for long (a cache) only keeps its
// own block; when the region has no room for a message's tensors they go
// through the socket as bytes.
//
// A tensor whose buffer was allocated in the region to begin with
// (outbound::allocate, data_plane::shared_buffer: a trainer's pushed
// gradients) is sent in place, without the copy, the first time; its
// block is taken back only once the sender's buffer is gone too.
//
// A region outlives its connection on the receiving side for as long as a
// tensor over it lives: a connection that breaks loses no delivered data.
//
// Trust: the sender can still write a block the receiver holds. The
// receiver checks every reference before it takes a block, and copies out
// the blocks of dtype::bytes tensors (af::tensor::load), whose offsets it
// checks once and then trusts; the values of other tensors are as
// trustworthy as the peer, which proved itself with the job's secret.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <sys/uio.h>

namespace af {
class buffer;
}

namespace af::data_shm {

constexpr uint32_t region_magic = 0x4d534641; // "AFSM"
constexpr uint32_t region_version = 1;
constexpr size_t align = 64;
/// The smallest region a receiver maps.
constexpr size_t min_region = size_t{1} << 20;
/// The largest (a bound on what a peer can make a receiver map).
constexpr size_t max_region = size_t{64} << 30;

/// Where a tensor's bytes are in the sender's region: 16 bytes on the wire
/// (offset, then bytes; little-endian).
struct block_ref {
  uint64_t offset = 0; // of the bytes, not of the block head
  uint64_t bytes = 0;
};
constexpr size_t ref_size = 16;
void encode(const block_ref& r, std::byte* out);
block_ref decode_ref(const std::byte* in);
/// A region frame's descriptor: the region's bytes (u64, little-endian).
constexpr size_t region_descriptor = 8;
void encode_region(uint64_t bytes, std::byte* out);
uint64_t decode_region(const std::byte* in);

/// The sending side's region.
class outbound {
public:
  /// A sealed memfd of `bytes` (rounded up to whole pages), mapped; or
  /// nullptr and `why`.
  static std::unique_ptr<outbound> make(size_t bytes, std::string& why);
  ~outbound();
  outbound(const outbound&) = delete;
  outbound& operator=(const outbound&) = delete;

  int fd() const { return fd_; }
  size_t size() const { return size_; }

  /// Copies every block of `blocks` into a block of its own and sets
  /// `refs`; false, with nothing taken, when the region has no room for
  /// all of them now. A block that is all of a buffer from allocate(), not
  /// sent yet, goes in place instead: no copy. Thread-safe.
  bool place(const std::vector<iovec>& blocks, std::vector<block_ref>& refs);
  /// A buffer of `bytes` in region `self`, for a tensor that the caller
  /// fills and then sends on this connection: place() sends it in place
  /// the first time (again, it copies). Its block goes back once the
  /// buffer is gone and the receiver let go of what was sent; the buffer
  /// keeps `self` mapped. nullptr when the region has no room now.
  /// Thread-safe.
  static std::shared_ptr<buffer> allocate(const std::shared_ptr<outbound>& self,
                                          size_t bytes);
  /// Bytes in blocks (heads included) the receiver still holds.
  size_t held();

private:
  outbound(int fd, std::byte* base, size_t size);
  void reclaim();                        // under mtx_
  void give_back(size_t at, size_t len); // under mtx_: free, merged
  // Under mtx_: a free block of `need` bytes (head included), first fit
  // from the region's start; false when there is none.
  bool take_free(size_t need, size_t& at);
  // The buffer over allocate()'s block at `at` is gone.
  void let_go(size_t at);

  int fd_;
  std::byte* base_;
  size_t size_;
  std::mutex mtx_;
  std::map<size_t, size_t> free_;               // block offset -> length
  std::vector<std::pair<size_t, size_t>> sent_; // blocks the receiver has
  // Blocks of allocate() whose buffer lives: offset -> (length, sent). A
  // sent one is also in sent_, and is not taken back while here.
  std::map<size_t, std::pair<size_t, bool>> local_;
  size_t held_ = 0;
};

/// The receiving side's map of a peer's region.
class inbound : public std::enable_shared_from_this<inbound> {
public:
  /// Maps the region behind `fd` (which it closes) of `bytes`, after
  /// checking that it is a memfd sealed at that size; or nullptr and `why`.
  static std::shared_ptr<inbound> map(int fd, uint64_t bytes, std::string& why);
  ~inbound();
  inbound(const inbound&) = delete;
  inbound& operator=(const inbound&) = delete;

  /// A buffer over the `n` bytes `r` names, in place; the block goes back to
  /// the sender when the buffer is gone. nullptr and `why` when `r` does not
  /// name a block of `n` bytes that was handed over.
  std::shared_ptr<const buffer> adopt(const block_ref& r, size_t n,
                                      std::string& why);
  size_t size() const { return size_; }
  /// Copies the block `r` names to `into` and gives it back.
  std::string copy_out(const block_ref& r, void* into, size_t n);

private:
  inbound(std::byte* base, size_t size) : base_(base), size_(size) {}
  // "" when `r` names a block of `n` bytes that was handed over and not
  // taken yet, which it now is.
  std::string take(const block_ref& r, size_t n);

  std::byte* base_;
  size_t size_;
};

} // namespace af::data_shm
