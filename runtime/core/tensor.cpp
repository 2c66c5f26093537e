// af::tensor: a typed, shaped view of a shared, immutable byte buffer.
// Declared in runtime/core/tensor.hpp.
#include "actorflow/runtime/core/tensor.hpp"

#include "actorflow/runtime/core/buffer_pool.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>

#include <caf/binary_deserializer.hpp>

namespace af {

namespace {

constexpr std::align_val_t buffer_alignment{64};

// A shape may have at most this many dimensions on the wire; anything larger
// is garbage, not a tensor.
constexpr size_t max_rank = 32;

} // namespace

size_t dtype_size(dtype t) noexcept {
  switch (t) {
    case dtype::bytes:
      return 0;
    case dtype::u8:
      return 1;
    case dtype::f16:
    case dtype::bf16:
      return 2;
    case dtype::i32:
    case dtype::f32:
      return 4;
    case dtype::i64:
    case dtype::f64:
      return 8;
  }
  return 0;
}

const char* dtype_name(dtype t) noexcept {
  switch (t) {
    case dtype::u8:
      return "u8";
    case dtype::i32:
      return "i32";
    case dtype::i64:
      return "i64";
    case dtype::f16:
      return "f16";
    case dtype::f32:
      return "f32";
    case dtype::f64:
      return "f64";
    case dtype::bytes:
      return "bytes";
    case dtype::bf16:
      return "bf16";
  }
  return "?";
}

bool dtype_valid(uint8_t raw) noexcept {
  return raw <= static_cast<uint8_t>(dtype::bf16);
}

buffer::buffer(size_t size, bool recycle)
  : data_(nullptr), size_(size), recycle_(recycle) {
  if (size == 0)
    return;
  if (recycle_)
    data_ = static_cast<std::byte*>(buffer_pool::take(size));
  if (data_ == nullptr)
    data_ = static_cast<std::byte*>(::operator new[](size, buffer_alignment));
}

buffer::buffer(std::byte* data, size_t size, std::shared_ptr<void> owner)
  : data_(data), size_(size), recycle_(false), owner_(std::move(owner)) {
}

buffer::buffer(size_t size, std::shared_ptr<const device_memory> device)
  : data_(nullptr), size_(size), recycle_(false), device_(std::move(device)) {
  if (!device_)
    throw std::invalid_argument("buffer: no device memory given");
  on_host_.store(size == 0, std::memory_order_release);
}

void buffer::fetch_from_device() const noexcept {
  std::call_once(fetch_, [this] {
    try {
      auto* host = static_cast<std::byte*>(
        ::operator new[](size_, buffer_alignment));
      try {
        device_->copy_to_host(host, size_);
      } catch (...) {
        ::operator delete[](host, buffer_alignment);
        throw;
      }
      data_ = host;
    } catch (const std::exception& e) {
      std::fprintf(stderr,
                   "actorflow: cannot copy %zu bytes from device %d to the "
                   "host: %s\n",
                   size_, device_->ordinal(), e.what());
      std::abort();
    }
    on_host_.store(true, std::memory_order_release);
  });
}

buffer::~buffer() {
  if (device_) {
    if (data_ != nullptr)
      ::operator delete[](data_, buffer_alignment);
    return; // device_ goes with the buffer
  }
  if (owner_)
    return; // owner_ goes with the buffer
  if (data_ != nullptr && !(recycle_ && buffer_pool::give(data_, size_)))
    ::operator delete[](data_, buffer_alignment);
}

tensor::tensor() : type_(dtype::u8), shape_{0} {
}

bool tensor::byte_size_of(dtype t, const shape_type& shape, size_t& out) {
  // The product of the dimensions other than 0 fits in int64_t, so that
  // elements() never overflows, whatever comes after a 0 (a shape such as
  // [2^43, 2^21, 0] has no bytes but would: found by fuzz_data_frame).
  uint64_t nonzero = 1;
  for (auto d : shape) {
    if (d < 0)
      return false;
    if (d == 0)
      continue;
    if (nonzero > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                    / static_cast<uint64_t>(d))
      return false;
    nonzero *= static_cast<uint64_t>(d);
  }
  size_t n = t == dtype::bytes ? 1 : dtype_size(t);
  for (auto d : shape) {
    auto ud = static_cast<size_t>(d);
    if (ud != 0 && n > std::numeric_limits<size_t>::max() / ud)
      return false;
    n *= ud;
  }
  if (t == dtype::bytes) {
    // n + 1 offsets of 8 bytes each.
    if (n > std::numeric_limits<size_t>::max() / 8 - 1)
      return false;
    n = (n + 1) * 8;
  }
  out = n;
  return true;
}

bool tensor::valid_strings(const buffer& buf, int64_t elements) noexcept {
  if (elements < 0)
    return false;
  auto count = static_cast<size_t>(elements);
  if (buf.size() / 8 < count + 1)
    return false;
  auto header = (count + 1) * 8;
  auto data_size = buf.size() - header;
  uint64_t prev = 0;
  for (size_t i = 0; i <= count; ++i) {
    uint64_t o;
    std::memcpy(&o, buf.data() + i * 8, 8);
    if ((i == 0 && o != 0) || o < prev || o > data_size)
      return false;
    prev = o;
  }
  return prev == data_size;
}

std::string_view tensor::string_at(int64_t i) const noexcept {
  auto n = static_cast<size_t>(elements());
  auto* base = data();
  uint64_t from, to;
  std::memcpy(&from, base + static_cast<size_t>(i) * 8, 8);
  std::memcpy(&to, base + static_cast<size_t>(i + 1) * 8, 8);
  auto* strings = reinterpret_cast<const char*>(base) + (n + 1) * 8;
  return {strings + from, static_cast<size_t>(to - from)};
}

tensor tensor::strings(const std::vector<std::string_view>& values) {
  size_t total = 0;
  for (auto v : values)
    total += v.size();
  bytes_builder b{total, values.size()};
  for (auto v : values)
    b.add(v);
  return b.finish();
}

void bytes_builder::block_free::operator()(std::byte* p) const noexcept {
  ::operator delete[](p, buffer_alignment);
}

bytes_builder::bytes_builder(size_t expected_bytes, size_t expected_count) {
  grow(expected_count + 1, expected_bytes);
}

void bytes_builder::grow(size_t need_slots, size_t need_bytes) {
  auto slots = std::max(need_slots, slots_);
  auto capacity = std::max(need_bytes, capacity_);
  block_ptr block{static_cast<std::byte*>(
    ::operator new[](slots * 8 + capacity, buffer_alignment))};
  if (block_) {
    std::memcpy(block.get(), block_.get(), (count_ + 1) * 8);
    if (used_ > 0)
      std::memcpy(block.get() + slots * 8, strings(), used_);
  } else {
    uint64_t zero = 0;
    std::memcpy(block.get(), &zero, 8);
  }
  block_ = std::move(block);
  slots_ = slots;
  capacity_ = capacity;
}

void bytes_builder::add(std::string_view s) {
  add(s.data(), s.size());
}

void bytes_builder::add(const void* data, size_t n) {
  if (!block_) // finished, or moved from: empty
    slots_ = capacity_ = count_ = used_ = 0;
  // Grow only what is short.
  if (count_ + 2 > slots_ || n > capacity_ - used_)
    grow(count_ + 2 > slots_ ? std::max(count_ + 2, 2 * slots_) : slots_,
         n > capacity_ - used_ ? std::max(2 * capacity_, used_ + n)
                               : capacity_);
  if (n > 0)
    std::memcpy(strings() + used_, data, n);
  used_ += n;
  ++count_;
  uint64_t end = used_;
  std::memcpy(block_.get() + count_ * 8, &end, 8);
}

tensor bytes_builder::finish() {
  if (!block_) { // finished, or moved from: empty
    slots_ = capacity_ = count_ = used_ = 0;
    grow(1, 0);
  }
  auto count = count_, used = used_;
  auto header = (count + 1) * 8;
  auto spare = slots_ * 8 + capacity_ - header - used;
  block_ptr block;
  if (spare > 4096 && spare > (header + used) / 4) {
    // Much more than it holds (a generous guess): a block of its size, so
    // that byte_size(), which budgets and caches count, stays near the
    // memory held.
    block.reset(static_cast<std::byte*>(
      ::operator new[](header + used, buffer_alignment)));
    std::memcpy(block.get(), block_.get(), header);
    if (used > 0)
      std::memcpy(block.get() + header, strings(), used);
    block_.reset();
  } else {
    if (count + 1 < slots_ && used > 0) // fewer strings than expected
      std::memmove(block_.get() + header, strings(), used);
    block = std::move(block_);
  }
  slots_ = capacity_ = count_ = used_ = 0; // empty, whatever comes next
  // shared_ptr's constructor frees `data` itself if it throws.
  auto* data = block.release();
  std::shared_ptr<void> owner{data, block_free{}};
  auto buf = std::make_shared<buffer>(data, header + used, std::move(owner));
  return tensor{dtype::bytes, {static_cast<int64_t>(count)}, std::move(buf)};
}

tensor tensor::allocate(dtype t, shape_type shape) {
  if (t == dtype::bytes)
    throw std::invalid_argument("tensor::allocate cannot make a bytes tensor; "
                                "use tensor::strings or bytes_builder");
  size_t n = 0;
  if (!byte_size_of(t, shape, n))
    throw std::invalid_argument("tensor shape has a negative or overflowing "
                                "dimension");
  return tensor{t, std::move(shape), std::make_shared<buffer>(n, true)};
}

tensor::tensor(dtype t, shape_type shape, std::shared_ptr<const buffer> buf)
  : type_(t), shape_(std::move(shape)), buf_(std::move(buf)),
    size_(buf_ ? buf_->size() : 0) {
  size_t n = 0;
  if (!byte_size_of(type_, shape_, n))
    throw std::invalid_argument("tensor shape has a negative or overflowing "
                                "dimension");
  if (type_ == dtype::bytes) {
    if (!buf_ || !valid_strings(*buf_, elements()))
      throw std::invalid_argument("bytes tensor buffer has invalid offsets");
    return;
  }
  if (n != byte_size())
    throw std::invalid_argument("tensor buffer holds "
                                + std::to_string(byte_size())
                                + " bytes, shape "
                                  "needs "
                                + std::to_string(n));
}

tensor tensor::view(dtype t, shape_type shape,
                    std::shared_ptr<const buffer> buf, size_t byte_offset) {
  size_t n = 0;
  if (t == dtype::bytes)
    throw std::invalid_argument("tensor::view cannot view bytes tensors");
  if (!byte_size_of(t, shape, n))
    throw std::invalid_argument("tensor shape has a negative or overflowing "
                                "dimension");
  if (!buf || byte_offset > buf->size() || n > buf->size() - byte_offset)
    throw std::invalid_argument("tensor::view: " + std::to_string(n)
                                + " bytes at offset "
                                + std::to_string(byte_offset)
                                + " do not lie within the buffer");
  tensor out;
  out.type_ = t;
  out.shape_ = std::move(shape);
  out.buf_ = std::move(buf);
  out.offset_ = byte_offset;
  out.size_ = n;
  return out;
}

int64_t tensor::elements() const noexcept {
  int64_t n = 1;
  for (auto d : shape_)
    n *= d;
  return n;
}

const void* tensor::device_data(int* ordinal) const noexcept {
  auto* dev = buf_ ? buf_->on_device() : nullptr;
  if (dev == nullptr)
    return nullptr;
  if (ordinal != nullptr)
    *ordinal = dev->ordinal();
  return static_cast<const std::byte*>(dev->pointer()) + offset_;
}

std::byte* tensor::mutable_data() {
  if (buf_ && buf_.use_count() != 1)
    throw std::logic_error("tensor::mutable_data on a shared buffer");
  if (buf_ && buf_->on_device() != nullptr)
    throw std::logic_error("tensor::mutable_data on a buffer in GPU memory");
  // The buffer was created non-const by allocate(); the const in the member
  // type only protects readers once the tensor is shared.
  return buf_ ? const_cast<buffer&>(*buf_).data() + offset_ : nullptr;
}

caf::error tensor::save(caf::serializer& sink) const {
  auto raw_type = static_cast<uint8_t>(type_);
  auto rank = shape_.size();
  if (auto err = sink(raw_type))
    return err;
  if (auto err = sink.begin_sequence(rank))
    return err;
  for (auto d : shape_)
    if (auto err = sink(d))
      return err;
  if (auto err = sink.end_sequence())
    return err;
  auto n = byte_size();
  if (auto err = sink.begin_sequence(n))
    return err;
  if (n > 0) {
    // apply_raw takes a non-const pointer but only reads when serializing.
    if (auto err = sink.apply_raw(n, const_cast<std::byte*>(data())))
      return err;
  }
  return sink.end_sequence();
}

caf::error tensor::load(caf::deserializer& source) {
  uint8_t raw_type = 0;
  if (auto err = source(raw_type))
    return err;
  if (!dtype_valid(raw_type))
    return caf::make_error(caf::sec::invalid_argument,
                           "af::tensor: unknown dtype "
                             + std::to_string(raw_type));
  size_t rank = 0;
  if (auto err = source.begin_sequence(rank))
    return err;
  if (rank > max_rank)
    return caf::make_error(caf::sec::invalid_argument,
                           "af::tensor: rank " + std::to_string(rank)
                             + " exceeds " + std::to_string(max_rank));
  shape_type shape(rank);
  for (auto& d : shape)
    if (auto err = source(d))
      return err;
  if (auto err = source.end_sequence())
    return err;
  size_t n = 0;
  if (auto err = source.begin_sequence(n))
    return err;
  size_t expected = 0;
  auto t = static_cast<dtype>(raw_type);
  bool fits = byte_size_of(t, shape, expected)
              && (t == dtype::bytes ? n >= expected : n == expected);
  if (!fits)
    return caf::make_error(caf::sec::invalid_argument,
                           "af::tensor: payload of " + std::to_string(n)
                             + " bytes does not match its shape");
  // Never allocate more than the message can hold.
  if (auto* bin = dynamic_cast<caf::binary_deserializer*>(&source))
    if (bin->remaining() < n)
      return caf::make_error(caf::sec::end_of_stream,
                             "af::tensor: payload truncated");
  auto* frame = dynamic_cast<block_source*>(&source);
  if (frame != nullptr)
    if (!frame->room_for(n))
      return caf::make_error(caf::sec::end_of_stream,
                             "af::tensor: payload truncated");
  // A frame of the data plane may hand over the bytes where they are
  // (shared memory: runtime/net/detail/data_shm.hpp), but for byte strings: their
  // offsets are checked below and trusted afterwards, and the peer can
  // still write memory it shares. Otherwise fixed-shape payloads, which
  // recur in size (batches, parameter slices and their parts), get buffers
  // from the pool, whose pages stay mapped, instead of fresh ones that
  // fault on every page.
  std::shared_ptr<const buffer> buf;
  if (frame != nullptr && t != dtype::bytes) {
    caf::error err;
    buf = frame->adopt(n, err);
    if (err)
      return err;
  }
  if (!buf) {
    auto own = std::make_shared<buffer>(n, t != dtype::bytes);
    if (n > 0)
      if (auto err = source.apply_raw(n, own->data()))
        return err;
    buf = std::move(own);
  }
  if (auto err = source.end_sequence())
    return err;
  int64_t count = 1;
  for (auto d : shape)
    count *= d;
  if (t == dtype::bytes && !valid_strings(*buf, count))
    return caf::make_error(caf::sec::invalid_argument,
                           "af::tensor: bytes tensor with invalid offsets");
  type_ = t;
  shape_ = std::move(shape);
  buf_ = std::move(buf);
  offset_ = 0;
  size_ = n;
  return caf::none;
}

bool operator==(const tensor& a, const tensor& b) {
  if (a.type() != b.type() || a.shape() != b.shape()
      || a.byte_size() != b.byte_size())
    return false;
  return a.byte_size() == 0
         || std::memcmp(a.data(), b.data(), a.byte_size()) == 0;
}

std::string to_string(const tensor& x) {
  std::string out = dtype_name(x.type());
  out += '[';
  for (size_t i = 0; i < x.shape().size(); ++i) {
    if (i > 0)
      out += ',';
    out += std::to_string(x.shape()[i]);
  }
  out += ']';
  return out;
}

} // namespace af
