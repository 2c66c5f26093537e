// The data plane's wire format (runtime/net/data_plane.hpp): one header,
// with the writer and the reader of a frame beside it. Declared in
// runtime/net/detail/data_frame.hpp.
#include "actorflow/runtime/net/detail/data_frame.hpp"

#include <cstring>

#include <caf/sec.hpp>

#include "actorflow/runtime/net/detail/data_shm.hpp"

namespace af::data_frame {

namespace {

void put16(std::byte* p, uint16_t v) {
  for (int i = 0; i < 2; ++i)
    p[i] = static_cast<std::byte>(v >> (8 * i));
}
void put32(std::byte* p, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    p[i] = static_cast<std::byte>(v >> (8 * i));
}
void put64(std::byte* p, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    p[i] = static_cast<std::byte>(v >> (8 * i));
}
template <class T>
T get(const std::byte* p) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i)
    v |= static_cast<T>(std::to_integer<uint8_t>(p[i])) << (8 * i);
  return v;
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

} // namespace

void encode(const header& h, std::byte* out) {
  std::memset(out, 0, header_size);
  put32(out, magic);
  put16(out + 4, version);
  put16(out + 6, static_cast<uint16_t>(h.type));
  put64(out + 8, h.target);
  put64(out + 16, h.sender);
  put64(out + 24, h.mid);
  put32(out + 32, h.descriptor);
  put64(out + 40, h.payload);
}

std::string decode(const std::byte* in, header& h) {
  auto m = get<uint32_t>(in);
  if (m != magic)
    return "bad magic " + hex(m);
  auto v = get<uint16_t>(in + 4);
  if (v != version)
    return "version " + std::to_string(v) + " (this node speaks "
           + std::to_string(version) + ")";
  auto k = get<uint16_t>(in + 6);
  if (k < 1 || k > 8)
    return "unknown frame kind " + std::to_string(k);
  h.type = static_cast<kind>(k);
  h.target = get<uint64_t>(in + 8);
  h.sender = get<uint64_t>(in + 16);
  h.mid = get<uint64_t>(in + 24);
  h.descriptor = get<uint32_t>(in + 32);
  if (auto r = get<uint32_t>(in + 36); r != 0)
    return "reserved field is " + hex(r);
  h.payload = get<uint64_t>(in + 40);
  bool control = h.type != kind::message && h.type != kind::shared_message;
  bool handshake = h.type == kind::hello || h.type == kind::welcome;
  auto limit = handshake            ? max_hello
               : h.type == kind::region ? uint32_t{data_shm::region_descriptor}
               : control                ? 0
                                        : max_descriptor;
  if (h.descriptor > limit)
    return "descriptor of " + std::to_string(h.descriptor) + " bytes exceeds "
           + std::to_string(limit);
  if (control && h.payload != 0)
    return "a control frame with a payload of " + std::to_string(h.payload)
           + " bytes";
  if (h.payload > max_payload)
    return "payload of " + std::to_string(h.payload) + " bytes exceeds "
           + std::to_string(max_payload);
  return {};
}

// --- writer ------------------------------------------------------------------

writer::writer(caf::actor_system& sys) : delegating(sys, buf_) {
  // nop
}

caf::error writer::apply_raw(size_t n, void* data) {
  if (n < bulk_bytes)
    return inner_.apply_raw(n, data);
  blocks_.push_back(iovec{data, n});
  payload_ += n;
  return caf::none;
}

// --- reader ------------------------------------------------------------------

reader::reader(caf::actor_system& sys, const std::vector<char>& descriptor,
               source& payload_source, uint64_t payload)
  : delegating(sys, descriptor), source_(payload_source), left_(payload) {
  // nop
}

bool reader::room_for(size_t n) const noexcept {
  return n < bulk_bytes ? inner_.remaining() >= n
                        : left_ >= source_.cost(n) && n <= source_.max_block();
}

std::string reader::leftover() const {
  if (inner_.remaining() != 0)
    return std::to_string(inner_.remaining())
           + " bytes of the descriptor were not read";
  if (left_ != 0)
    return std::to_string(left_) + " bytes of the payload were not read";
  return {};
}

std::shared_ptr<const buffer> reader::adopt(size_t n, caf::error& err) {
  if (n < bulk_bytes || source_.cost(n) > left_)
    return nullptr; // apply_raw reads it, or says why it cannot
  auto buf = source_.adopt(n, err);
  if (buf)
    left_ -= source_.cost(n);
  return buf;
}

caf::error reader::apply_raw(size_t n, void* data) {
  if (n < bulk_bytes)
    return inner_.apply_raw(n, data);
  auto cost = source_.cost(n);
  if (cost > left_)
    return caf::make_error(caf::sec::end_of_stream,
                           "a block of " + std::to_string(n)
                             + " bytes where the payload has "
                             + std::to_string(left_) + " left");
  if (auto err = source_.read(data, n))
    return err;
  left_ -= cost;
  return caf::none;
}

} // namespace af::data_frame
