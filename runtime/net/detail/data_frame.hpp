// The data plane's wire format (runtime/net/data_plane.hpp): one header, with
// the writer and the reader of a frame beside it. Internal, not installed.
//
// A connection carries frames, each a fixed header, a descriptor, and a
// payload:
//
//   offset size  field
//   0      4     magic "AFDP" (0x50444641, little-endian like every field)
//   4      2     version (2; 1 had no shared memory, kinds 6-8)
//   6      2     kind: 1 hello, 2 welcome, 3 message, 4 ping, 5 pong,
//                6 region, 7 shared message, 8 region answer
//   8      8     target actor id (on the receiving node; 0 for hello/welcome)
//   16     8     sender actor id (on the sending node; 0: anonymous)
//   24     8     CAF message id (caf::message_id::integer_value); ping
//                and pong: a token; region answer: 1 mapped, 0 not
//   32     4     descriptor bytes (<= max_descriptor; <= max_hello for
//                hello and welcome; 8 for a region; 0 for the others)
//   36     4     reserved, 0
//   40     8     payload bytes (<= max_payload; 0 for the kinds but
//                message and shared message)
//
// A ping is answered with a pong carrying its token once the ping was
// read: every frame the peer wrote on that connection before it arrived
// precedes the pong (data_plane::drain).
//
// The descriptor of a message frame is the caf::message serialized by
// CAF's binary serializer, except that floats are their IEEE 754 bits
// (u32, u64), and that every raw block of at least
// `bulk_bytes` (a tensor's payload: af::tensor::save writes it with one
// apply_raw) is left out of it: the writer sends those blocks, in order, as
// the payload, straight from the tensors' own buffers (writev), and the
// reader reads each straight into the buffer the tensor being deserialized
// allocated (from the pool, 64-byte aligned). So a tensor's bytes are
// copied once by the sender's kernel and once by the receiver's, and by
// nobody else.
//
// Shared memory (runtime/net/detail/data_shm.hpp), on a Unix socket only: a region
// frame's descriptor is the region's size (u64), and the memfd behind it
// travels with the frame's first byte (SCM_RIGHTS; a file descriptor with
// any other frame closes the connection). Each side sends at most one,
// right after the handshake, and the other answers it with a region
// answer: 1 once it mapped the region, 0 when it cannot (then the tensors
// keep coming through the socket). A side sends shared messages only after
// a 1. A shared message is a message whose payload is not the raw blocks
// but a block_ref (16 bytes: offset, bytes) per raw block, each naming
// where that block is in the sender's region; the reader's tensors are
// those blocks, in place (but for dtype::bytes tensors, whose offsets the
// reader checks and so copies out first).
//
// The first frame on a connection is the dialer's hello: its descriptor is
// the job's secret (a string) and the dialer's caf::node_id. The acceptor
// answers a hello whose secret it knows with a welcome (its own node_id)
// and closes the connection otherwise.
//
// A frame is delivered only when all of it arrived and its descriptor
// deserialized to exactly its length, with exactly `payload` bytes of raw
// blocks: a connection that ends inside a frame, or a frame whose parts do
// not add up, delivers nothing of it and is closed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <sys/uio.h>

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/deserializer.hpp>
#include <caf/error.hpp>
#include <caf/fwd.hpp>
#include <caf/serializer.hpp>

#include "actorflow/runtime/core/tensor.hpp"

namespace af::data_frame {

constexpr uint32_t magic = 0x50444641; // "AFDP"
constexpr uint16_t version = 2;
constexpr size_t header_size = 48;
/// Raw blocks of at least this many bytes travel in the payload.
constexpr size_t bulk_bytes = 4096;
constexpr uint32_t max_descriptor = uint32_t{64} << 20;
constexpr uint32_t max_hello = 4096;
constexpr uint64_t max_payload = uint64_t{16} << 30;

enum class kind : uint16_t {
  hello = 1,
  welcome = 2,
  message = 3,
  ping = 4,
  pong = 5,
  region = 6,
  shared_message = 7,
  region_answer = 8
};

struct header {
  kind type = kind::message;
  uint64_t target = 0;
  uint64_t sender = 0;
  uint64_t mid = 0;
  uint32_t descriptor = 0;
  uint64_t payload = 0;
};

/// The header's 48 bytes.
void encode(const header& h, std::byte* out);
/// Parses and checks a header; "" and `h` filled, or what is wrong with it
/// ("bad magic 0x12345678", "descriptor of 70000000 bytes exceeds ...").
std::string decode(const std::byte* in, header& h);

/// A CAF serializer or deserializer (`Base`) that hands every value to
/// CAF's binary one (`Inner`), but for raw blocks: the two classes below
/// decide where those go.
template <class Base, class Inner>
class delegating : public Base {
public:
  template <class... Ts>
  explicit delegating(caf::actor_system& sys, Ts&&... xs)
    : Base(sys), inner_(sys, std::forward<Ts>(xs)...) {}

  caf::error begin_object(uint16_t& nr, std::string& name) override {
    return inner_.begin_object(nr, name);
  }
  caf::error end_object() override { return inner_.end_object(); }
  caf::error begin_sequence(size_t& n) override {
    return inner_.begin_sequence(n);
  }
  caf::error end_sequence() override { return inner_.end_sequence(); }

protected:
  caf::error apply_impl(int8_t& x) override { return inner_(x); }
  caf::error apply_impl(uint8_t& x) override { return inner_(x); }
  caf::error apply_impl(int16_t& x) override { return inner_(x); }
  caf::error apply_impl(uint16_t& x) override { return inner_(x); }
  caf::error apply_impl(int32_t& x) override { return inner_(x); }
  caf::error apply_impl(uint32_t& x) override { return inner_(x); }
  caf::error apply_impl(int64_t& x) override { return inner_(x); }
  caf::error apply_impl(uint64_t& x) override { return inner_(x); }
  // Floats travel as their IEEE 754 bits: CAF 0.17's pack754 never ends
  // on an infinity (a message holding one would hang its sender), and
  // both ends of a frame are ours.
  caf::error apply_impl(float& x) override { return bits<uint32_t>(x); }
  caf::error apply_impl(double& x) override { return bits<uint64_t>(x); }
  caf::error apply_impl(long double& x) override { return inner_(x); }
  caf::error apply_impl(std::string& x) override { return inner_(x); }
  caf::error apply_impl(std::u16string& x) override { return inner_(x); }
  caf::error apply_impl(std::u32string& x) override { return inner_(x); }

  Inner inner_;

private:
  template <class Bits, class Float>
  caf::error bits(Float& x) {
    static_assert(sizeof(Bits) == sizeof(Float));
    Bits b;
    if constexpr (std::is_base_of_v<caf::serializer, Base>) {
      std::memcpy(&b, &x, sizeof b);
      return inner_(b);
    } else {
      if (auto err = inner_(b))
        return err;
      std::memcpy(&x, &b, sizeof b);
      return caf::none;
    }
  }
};

// The descriptor's bytes, made before the serializer that fills them.
struct descriptor_bytes {
  std::vector<char> buf_;
};

/// A serializer that writes a CAF value as a descriptor and keeps the raw
/// blocks of at least bulk_bytes aside, as pointers into the value: the
/// value must stay alive, unchanged, until the frame is written.
class writer final
  : private descriptor_bytes,
    public delegating<caf::serializer, caf::binary_serializer> {
public:
  explicit writer(caf::actor_system& sys);

  const std::vector<char>& descriptor() const noexcept { return buf_; }
  const std::vector<iovec>& blocks() const noexcept { return blocks_; }
  uint64_t payload() const noexcept { return payload_; }

  caf::error apply_raw(size_t n, void* data) override;

private:
  std::vector<iovec> blocks_;
  uint64_t payload_ = 0;
};

/// Where a reader takes the payload's raw blocks from: `read` fills exactly
/// `n` bytes at `into`, or returns the error that stopped it.
class source {
public:
  virtual ~source() = default;
  virtual caf::error read(void* into, size_t n) = 0;
  /// The payload bytes a raw block of `n` bytes takes in the frame: `n`,
  /// or the size of its reference when the bytes are elsewhere.
  virtual uint64_t cost(size_t n) const { return n; }
  /// The largest raw block this source can hold (a tensor does not
  /// allocate more before it reads).
  virtual uint64_t max_block() const { return max_payload; }
  /// The next raw block, of `n` bytes, as a buffer where it already is
  /// (shared memory), instead of read() into one; nullptr when this
  /// source has no such blocks (`err` stays empty) or on an error.
  virtual std::shared_ptr<const buffer> adopt(size_t n, caf::error& err) {
    (void) n;
    (void) err;
    return nullptr;
  }
};

/// A deserializer over a frame's descriptor that reads each raw block of at
/// least bulk_bytes from `payload_source`, straight into the memory the
/// value being deserialized provides, and never more than the frame's
/// payload holds. Load a caf::message with `msg.load(reader)`:
/// `reader(msg)` loses the error of an element that fails to load (CAF
/// 0.17, ../shared/docs/caf-notes.md).
class reader final
  : public delegating<caf::deserializer, caf::binary_deserializer>,
    public block_source {
public:
  reader(caf::actor_system& sys, const std::vector<char>& descriptor,
         source& payload_source, uint64_t payload);

  /// Whether a raw block of `n` bytes can still be in this frame (checked
  /// by af::tensor::load before it allocates).
  bool room_for(size_t n) const noexcept override;
  /// "" once every byte of the descriptor and the payload was consumed;
  /// else what was left over.
  std::string leftover() const;

  caf::error apply_raw(size_t n, void* data) override;
  /// The next raw block of `n` bytes as the source hands it over in place
  /// (af::tensor::load asks before it allocates); nullptr when the source
  /// does not (`err` empty), or when the block is not there (`err` set).
  std::shared_ptr<const buffer> adopt(size_t n, caf::error& err) override;

private:
  source& source_;
  uint64_t left_;
};

} // namespace af::data_frame
