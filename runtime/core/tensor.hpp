// af::tensor: a typed, shaped view of a shared, immutable byte buffer.
//
// Ownership: a tensor holds a shared_ptr<const buffer>. Copying a tensor (or a
// batch, or a CAF message holding one) shares the buffer; the payload is
// never copied between local actors. A buffer is written once, by whoever
// creates it through `tensor::allocate` + `mutable_data()` before the tensor
// is shared, and is read-only afterwards.
//
// Serialization: tensors cross hosts through CAF's binary serializer as
// dtype, shape and then the payload as one raw block (one bulk copy), never
// element by element. Deserialization checks that the payload size matches
// dtype x shape and that the bytes are actually present before allocating.
//
// dtype::bytes tensors hold one byte string per element (encoded images,
// serialized records). Their buffer is the element count + 1 offsets (u64,
// relative to the end of the offsets) followed by the strings back to back:
//   [o_0 = 0][o_1]...[o_n][string 0][string 1]...[string n-1]
// Build them with tensor::strings or bytes_builder; read with string_at.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <caf/deserializer.hpp>
#include <caf/error.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/sec.hpp>
#include <caf/serializer.hpp>

#include "actorflow/runtime/core/device_memory.hpp"

namespace af {

/// bf16 came last (0.2): the values of the others are in files and on the
/// wire.
enum class dtype : uint8_t { u8 = 0, i32, i64, f16, f32, f64, bytes, bf16 };

/// Bytes per element; 0 for `bytes` (variable-length strings).
size_t dtype_size(dtype t) noexcept;
/// "u8", "i32", ... ; "?" for values outside the enum.
const char* dtype_name(dtype t) noexcept;
/// Whether `raw` is a valid dtype value (used when deserializing).
bool dtype_valid(uint8_t raw) noexcept;

/// A 64-byte aligned, fixed-size block of bytes.
class buffer {
public:
  /// `recycle`: take the block from, and return it to, the buffer pool
  /// (runtime/core/buffer_pool.hpp). Only for sizes that recur (fixed-shape
  /// tensors); blocks of one-off sizes would fill the pool with memory that
  /// is never reused.
  /// Throws std::bad_alloc. The destructor frees the block (or returns it
  /// to the pool).
  explicit buffer(size_t size, bool recycle = false);
  /// A block that lives elsewhere (memory shared with another process:
  /// runtime/net/detail/data_shm.hpp; the block a bytes_builder wrote): `data` (64-byte aligned) stays valid while
  /// `owner` lives, and the buffer lets go of `owner` when it goes.
  buffer(std::byte* data, size_t size, std::shared_ptr<void> owner);
  /// A block in accelerator memory. A consumer on the same device reads it
  /// there (on_device()); the first data() copies it to host memory, once,
  /// for everyone else (a CPU stage, the wire). A device that fails that
  /// copy is beyond recovery: data() then ends the process with a message
  /// (it cannot throw).
  buffer(size_t size, std::shared_ptr<const device_memory> device);
  ~buffer();
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;

  size_t size() const noexcept { return size_; }
  /// The payload; nullptr when there is none. Valid while any tensor that
  /// shares the buffer lives. data_as<T> does not check that T matches
  /// type().
  const std::byte* data() const noexcept {
    if (device_ && !on_host_.load(std::memory_order_acquire))
      fetch_from_device();
    return data_;
  }
  std::byte* data() noexcept {
    return const_cast<std::byte*>(std::as_const(*this).data());
  }
  /// The accelerator memory holding the bytes, or nullptr for host memory.
  const device_memory* on_device() const noexcept { return device_.get(); }

private:
  void fetch_from_device() const noexcept;

  mutable std::byte* data_;
  size_t size_;
  bool recycle_;
  std::shared_ptr<void> owner_; // set: data_ is not ours to free
  std::shared_ptr<const device_memory> device_;
  mutable std::atomic<bool> on_host_{true};
  mutable std::once_flag fetch_;
};

/// A deserializer that can hand a raw block over in place, or say that it
/// cannot be there, before the block is allocated: the data plane's frame
/// reader (runtime/net/detail/data_frame.hpp) is one. tensor's load asks
/// for this interface (dynamic_cast) and otherwise copies.
class block_source {
public:
  virtual ~block_source() = default;
  /// Whether a raw block of `n` bytes can still follow.
  virtual bool room_for(size_t n) const noexcept = 0;
  /// The next raw block of `n` bytes where it lies; nullptr when the source
  /// does not hand blocks over (`err` empty) or the block is not there
  /// (`err` set).
  virtual std::shared_ptr<const buffer> adopt(size_t n, caf::error& err) = 0;
};

class tensor {
public:
  using shape_type = std::vector<int64_t>;

  /// An empty u8 tensor of shape {0}.
  tensor();

  /// Allocates an uninitialised tensor. Fill it through mutable_data()
  /// before sharing it. Throws std::invalid_argument on a negative dimension,
  /// a byte size that overflows, or dtype::bytes (use strings()).
  static tensor allocate(dtype t, shape_type shape);

  /// A dtype::bytes tensor of shape {n} holding `values`.
  static tensor strings(const std::vector<std::string_view>& values);

  /// Wraps an existing buffer, sharing it; its size must equal dtype x shape
  /// (for dtype::bytes: hold valid offsets for the elements). Throws
  /// std::invalid_argument otherwise, or for a negative or overflowing
  /// shape.
  tensor(dtype t, shape_type shape, std::shared_ptr<const buffer> buf);

  /// A fixed-size tensor over part of `buf`: dtype x shape bytes from
  /// `byte_offset` on, shared, not copied (a parameter-server shard answers
  /// with views of its values and copies them only when it must change
  /// them while a view is still out). Throws std::invalid_argument for
  /// dtype::bytes or when the part does not lie within the buffer.
  static tensor view(dtype t, shape_type shape,
                     std::shared_ptr<const buffer> buf, size_t byte_offset);

  dtype type() const noexcept { return type_; }
  const shape_type& shape() const noexcept { return shape_; }
  /// Number of elements (product of the shape; 1 for a scalar).
  int64_t elements() const noexcept;
  /// Payload size in bytes.
  size_t byte_size() const noexcept { return buf_ ? size_ : 0; }
  /// First dimension, or 1 for a scalar.
  int64_t rows() const noexcept { return shape_.empty() ? 1 : shape_[0]; }

  /// dtype::bytes only: element `i` (0 <= i < elements()) of the flattened
  /// tensor; neither is checked. The view lives as long as the buffer.
  std::string_view string_at(int64_t i) const noexcept;

  const std::byte* data() const noexcept {
    return buf_ ? buf_->data() + offset_ : nullptr;
  }
  template <class T>
  const T* data_as() const noexcept {
    return reinterpret_cast<const T*>(data());
  }
  /// Writable payload. Only valid while this tensor is the buffer's sole
  /// owner (right after allocate) and the buffer is in host memory; throws
  /// std::logic_error otherwise.
  std::byte* mutable_data();
  template <class T>
  T* mutable_data_as() {
    return reinterpret_cast<T*>(mutable_data());
  }

  const std::shared_ptr<const buffer>& storage() const noexcept { return buf_; }

  /// The payload in accelerator memory when the buffer lives there
  /// (buffer::on_device), with the device's ordinal in `ordinal`; nullptr
  /// for a host buffer. Reading it does not copy it to the host.
  const void* device_data(int* ordinal = nullptr) const noexcept;

  /// Byte size of dtype x shape; false on negative or overflowing
  /// dimensions. For dtype::bytes: the size of the offsets alone.
  static bool byte_size_of(dtype t, const shape_type& shape, size_t& out);

  /// dtype::bytes only: whether `buf` holds valid offsets for `elements`
  /// strings (monotonic, ending at the buffer's end).
  static bool valid_strings(const buffer& buf, int64_t elements) noexcept;

private:
  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, tensor& x);

  caf::error save(caf::serializer& sink) const;
  caf::error load(caf::deserializer& source);

  dtype type_;
  shape_type shape_;
  std::shared_ptr<const buffer> buf_;
  size_t offset_ = 0; // where the payload starts in buf_ (view())
  size_t size_ = 0;   // its bytes
};

/// Builds a dtype::bytes tensor string by string, writing each string once,
/// straight into the block the tensor will own. `expected_bytes` and
/// `expected_count` are sizes to start with; the block grows (doubling)
/// when they are exceeded. finish() hands the block over as it is, after
/// moving the strings down to the offsets when fewer came than expected;
/// it copies into a block of the tensor's size only when the spare room
/// is over 4 KiB and over a quarter of the tensor, so that byte_size()
/// (what edge budgets and caches count) stays close to the memory held.
/// After finish() (or a move) the builder is empty and holds no block; the
/// next add() allocates one.
class bytes_builder {
public:
  explicit bytes_builder(size_t expected_bytes = 0, size_t expected_count = 0);
  /// Appends a copy of the string (std::bad_alloc is the only error).
  void add(std::string_view s);
  void add(const void* data, size_t n);
  size_t size() const noexcept { return count_; }
  /// Bytes of string data added so far.
  size_t data_bytes() const noexcept { return used_; }
  /// A tensor of shape {size()}; the builder is empty afterwards.
  tensor finish();

private:
  struct block_free {
    void operator()(std::byte* p) const noexcept;
  };
  using block_ptr = std::unique_ptr<std::byte[], block_free>;
  // block_: `slots_` u64 offsets (o_0 = 0 first), then `capacity_` bytes of
  // strings, of which `used_` are written.
  void grow(size_t need_slots, size_t need_bytes);
  std::byte* strings() const noexcept { return block_.get() + slots_ * 8; }

  block_ptr block_;
  size_t slots_ = 0;
  size_t capacity_ = 0;
  size_t count_ = 0;
  size_t used_ = 0;
};

/// Structural equality: dtype, shape and payload bytes.
bool operator==(const tensor& a, const tensor& b);
inline bool operator!=(const tensor& a, const tensor& b) {
  return !(a == b);
}

std::string to_string(const tensor& x);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tensor& x) {
  if constexpr (std::is_base_of<caf::serializer, Inspector>::value) {
    return x.save(f);
  } else if constexpr (std::is_base_of<caf::deserializer, Inspector>::value) {
    return x.load(f);
  } else {
    // Stringification and other read-only inspectors: a summary, no payload.
    auto summary = to_string(x);
    return f(caf::meta::type_name("af::tensor"), summary);
  }
}

} // namespace af
