// The one state format of checkpoints: every checkpoint part (a stage
// replica's state, a PS shard's snapshot, the job's own part) and every
// state inside one. Declared in runtime/state/state_io.hpp.
#include "actorflow/runtime/state/state_io.hpp"

#include "actorflow/runtime/formats/crc32c.hpp"

namespace af {

namespace {

constexpr uint32_t state_magic = 0x41465354; // "AFST" (written big-endian)

struct frame_header {
  uint32_t magic = 0;
  uint16_t format = 0;
  std::string tag;
  uint32_t crc = 0;
  size_t payload_size = 0;
  size_t payload_at = 0;
};

// The header of `bytes`; false when `bytes` does not start with a whole
// header and a payload length that fits.
bool read_header(const std::string& bytes, frame_header& h) {
  caf::binary_deserializer source{nullptr, bytes.data(), bytes.size()};
  if (source(h.magic) || h.magic != state_magic || source(h.format))
    return false;
  if (h.format != state_format)
    return true; // the caller names the version; the rest may differ
  if (source(h.tag, h.crc) || source.begin_sequence(h.payload_size))
    return false;
  h.payload_at = bytes.size() - source.remaining();
  return h.payload_size == source.remaining();
}

} // namespace

std::string frame_state(const std::string& tag,
                        const std::vector<char>& payload) {
  return frame_state(tag, payload, std::string_view{});
}

std::string frame_state(const std::string& tag, const std::vector<char>& head,
                        std::string_view tail) {
  // The header, then the payload copied once into the result (a large
  // state, a cache's epoch, is copied no more than that).
  std::vector<char> header;
  caf::binary_serializer sink{nullptr, header};
  auto magic = state_magic;
  auto format = state_format;
  auto name = tag;
  auto crc = crc32c_extend(crc32c(head.data(), head.size()), tail.data(),
                           tail.size());
  auto size = head.size() + tail.size();
  if (sink(magic, format, name, crc) || sink.begin_sequence(size))
    throw std::runtime_error("cannot serialize the " + tag + " state");
  std::string result;
  result.reserve(header.size() + size);
  result.append(header.data(), header.size());
  result.append(head.data(), head.size());
  result.append(tail.data(), tail.size());
  return result;
}

std::string_view unframe_state(const std::string& bytes,
                               const std::string& tag) {
  frame_header h;
  if (!read_header(bytes, h)) {
    if (h.magic != state_magic)
      throw std::invalid_argument(
        "not a " + tag + " state: no state frame of format "
        + std::to_string(state_format)
        + " (states of format 1, written by ActorFlow 0.1, are not read)");
    throw std::invalid_argument("a damaged " + tag + " state: its frame is "
                                "truncated (" + std::to_string(bytes.size())
                                + " bytes)");
  }
  if (h.format != state_format)
    throw std::invalid_argument(
      "a " + tag + " state of format " + std::to_string(h.format)
      + "; this ActorFlow reads format " + std::to_string(state_format));
  if (h.tag != tag)
    throw std::invalid_argument("not a " + tag + " state (a " + h.tag
                                + " state)");
  std::string_view payload{bytes.data() + h.payload_at, h.payload_size};
  if (crc32c(payload.data(), payload.size()) != h.crc)
    throw std::invalid_argument("a damaged " + tag
                                + " state: its CRC does not match ("
                                + std::to_string(payload.size())
                                + " bytes of values)");
  return payload;
}

std::string state_tag(const std::string& bytes) {
  frame_header h;
  if (!read_header(bytes, h) || h.format != state_format)
    return {};
  return h.tag;
}

} // namespace af
