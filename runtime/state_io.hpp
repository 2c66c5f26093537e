// Stage states for checkpoints as bytes (stage_logic::snapshot/restore):
// a tag that names the stage type and its state format, then the values in
// order, through CAF's binary serializer (the same encoding as on the wire,
// so batches and tensors travel as one raw block each).
//
//   std::string snapshot() const override {
//     return save_state("batcher/1", pending_, offset_, seq_, epoch_);
//   }
//   void restore(const std::string& s) override {
//     load_state(s, "batcher/1", pending_, offset_, seq_, epoch_);
//   }
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

namespace af {

/// Throws std::runtime_error if a value cannot be serialized.
template <class... Ts>
std::string save_state(const std::string& tag, const Ts&... xs) {
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  auto name = tag;
  if (auto err = sink(name, const_cast<Ts&>(xs)...))
    throw std::runtime_error("cannot serialize the " + tag + " state");
  return std::string(buf.begin(), buf.end());
}

/// Reads what save_state(tag, ...) wrote into `xs`. Throws
/// std::invalid_argument when `bytes` is not a `tag` state (another tag,
/// truncated, or with bytes left over); the values are then unspecified.
template <class... Ts>
void load_state(const std::string& bytes, const std::string& tag,
                Ts&... xs) {
  caf::binary_deserializer source{nullptr, bytes.data(), bytes.size()};
  std::string name;
  if (source(name) || name != tag)
    throw std::invalid_argument("not a " + tag + " state");
  if (source(xs...) || source.remaining() != 0)
    throw std::invalid_argument("a damaged " + tag + " state ("
                                + std::to_string(bytes.size()) + " bytes)");
}

} // namespace af
