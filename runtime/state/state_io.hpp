// The one state format of checkpoints: every checkpoint part (a stage
// replica's state, a PS shard's snapshot, the job's own part) and every
// state inside one (a stage's logic) is a state frame written by
// save_state and read by load_state.
//
// A frame, through CAF 0.17's binary serializer (integers big-endian,
// strings as a varint length and the bytes):
//
//   u32     magic 0x41465354 ("AFST", the frame's first four bytes)
//   u16     format version: state_format (2; ActorFlow 0.1 wrote untagged
//           states and checkpoints of format 1, which are refused)
//   string  tag: the state's kind and its own version, "batcher/2"
//   u32     CRC32C of the payload (runtime/formats/crc32c.hpp)
//   bytes   payload (varint length, then the bytes): the values in order,
//           through the same serializer (so batches and tensors travel as
//           one raw block each)
//
// Nothing follows the payload. A tag's version changes when the values it
// holds change; the frame's version when this layout does.
//
//   std::string snapshot() const override {
//     return save_state("batcher/2", pending_, offset_, seq_, epoch_);
//   }
//   void restore(const std::string& s) override {
//     load_state(s, "batcher/2", pending_, offset_, seq_, epoch_);
//   }
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

namespace af {

/// The frame layout this build writes and reads.
inline constexpr uint16_t state_format = 2;

/// The frame around `payload` under `tag`.
std::string frame_state(const std::string& tag,
                        const std::vector<char>& payload);

/// The frame around the payload `head` followed by `tail` (copied once:
/// a stage's state around its logic's large snapshot).
std::string frame_state(const std::string& tag, const std::vector<char>& head,
                        std::string_view tail);

/// The payload of the frame `bytes` (a view into it). Throws
/// std::invalid_argument when `bytes` is not a frame (naming the format
/// 1 of ActorFlow 0.1 when it may be one), is of another format version,
/// has another tag, or fails its CRC: the message says which and names
/// `tag`.
std::string_view unframe_state(const std::string& bytes,
                               const std::string& tag);

/// The tag of the frame `bytes`; "" when `bytes` is not a frame of this
/// format.
std::string state_tag(const std::string& bytes);

/// Throws std::runtime_error if a value cannot be serialized.
template <class... Ts>
std::string save_state(const std::string& tag, const Ts&... xs);

/// save_state for a state of about `bytes` bytes (a cache's epoch): the
/// buffer is reserved once instead of growing (and being faulted in) by
/// doubling.
template <class... Ts>
std::string save_sized_state(size_t bytes, const std::string& tag,
                             const Ts&... xs) {
  std::vector<char> payload;
  payload.reserve(bytes);
  caf::binary_serializer sink{nullptr, payload};
  if (auto err = sink(const_cast<Ts&>(xs)...))
    throw std::runtime_error("cannot serialize the " + tag + " state");
  return frame_state(tag, payload);
}

template <class... Ts>
std::string save_state(const std::string& tag, const Ts&... xs) {
  std::vector<char> payload;
  caf::binary_serializer sink{nullptr, payload};
  if (auto err = sink(const_cast<Ts&>(xs)...))
    throw std::runtime_error("cannot serialize the " + tag + " state");
  return frame_state(tag, payload);
}

/// Reads what save_state(tag, ...) wrote into `xs`. Throws
/// std::invalid_argument as unframe_state does, or when the payload does
/// not hold exactly such values (truncated, or with bytes left over); the
/// values are then unspecified.
template <class... Ts>
void load_state(const std::string& bytes, const std::string& tag,
                Ts&... xs) {
  auto payload = unframe_state(bytes, tag);
  caf::binary_deserializer source{nullptr, payload.data(), payload.size()};
  if (source(xs...) || source.remaining() != 0)
    throw std::invalid_argument("a damaged " + tag + " state ("
                                + std::to_string(payload.size())
                                + " bytes of values)");
}

} // namespace af
