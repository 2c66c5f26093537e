#include "runtime/tensor.hpp"

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
    case dtype::u8:
    case dtype::bytes:
      return 1;
    case dtype::f16:
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
  }
  return "?";
}

bool dtype_valid(uint8_t raw) noexcept {
  return raw <= static_cast<uint8_t>(dtype::bytes);
}

buffer::buffer(size_t size)
  : data_(size == 0 ? nullptr
                    : static_cast<std::byte*>(
                      ::operator new[](size, buffer_alignment))),
    size_(size) {
}

buffer::~buffer() {
  if (data_ != nullptr)
    ::operator delete[](data_, buffer_alignment);
}

tensor::tensor() : type_(dtype::u8), shape_{0} {
}

bool tensor::byte_size_of(dtype t, const shape_type& shape, size_t& out) {
  size_t n = dtype_size(t);
  for (auto d : shape) {
    if (d < 0)
      return false;
    auto ud = static_cast<size_t>(d);
    if (ud != 0 && n > std::numeric_limits<size_t>::max() / ud)
      return false;
    n *= ud;
  }
  out = n;
  return true;
}

tensor tensor::allocate(dtype t, shape_type shape) {
  size_t n = 0;
  if (!byte_size_of(t, shape, n))
    throw std::invalid_argument("tensor shape has a negative or overflowing "
                                "dimension");
  return tensor{t, std::move(shape), std::make_shared<buffer>(n)};
}

tensor::tensor(dtype t, shape_type shape, std::shared_ptr<const buffer> buf)
  : type_(t), shape_(std::move(shape)), buf_(std::move(buf)) {
  size_t n = 0;
  if (!byte_size_of(type_, shape_, n))
    throw std::invalid_argument("tensor shape has a negative or overflowing "
                                "dimension");
  if (n != byte_size())
    throw std::invalid_argument("tensor buffer holds "
                                + std::to_string(byte_size())
                                + " bytes, shape "
                                  "needs "
                                + std::to_string(n));
}

int64_t tensor::elements() const noexcept {
  int64_t n = 1;
  for (auto d : shape_)
    n *= d;
  return n;
}

std::byte* tensor::mutable_data() {
  if (buf_ && buf_.use_count() != 1)
    throw std::logic_error("tensor::mutable_data on a shared buffer");
  // The buffer was created non-const by allocate(); the const in the member
  // type only protects readers once the tensor is shared.
  return buf_ ? const_cast<buffer&>(*buf_).data() : nullptr;
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
  if (!byte_size_of(t, shape, expected) || expected != n)
    return caf::make_error(caf::sec::invalid_argument,
                           "af::tensor: payload of " + std::to_string(n)
                             + " bytes does not match its shape");
  // Never allocate more than the message can hold.
  if (auto* bin = dynamic_cast<caf::binary_deserializer*>(&source))
    if (bin->remaining() < n)
      return caf::make_error(caf::sec::end_of_stream,
                             "af::tensor: payload truncated");
  auto buf = std::make_shared<buffer>(n);
  if (n > 0)
    if (auto err = source.apply_raw(n, buf->data()))
      return err;
  if (auto err = source.end_sequence())
    return err;
  type_ = t;
  shape_ = std::move(shape);
  buf_ = std::move(buf);
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
