// Deterministic randomness for data stages: every record gets its own
// generator seeded from (job seed, epoch, record index), so results do not
// depend on which replica handles a record or in what order.
#pragma once

#include <cstdint>

namespace af {

/// SplitMix64 step: a well-mixed 64-bit value from any 64-bit input.
constexpr uint64_t mix64(uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// Small, fast generator (SplitMix64 sequence).
class record_rng {
public:
  constexpr explicit record_rng(uint64_t seed) noexcept : state_(seed) {}
  record_rng(uint64_t seed, uint64_t epoch, uint64_t index) noexcept
    : state_(mix64(mix64(mix64(seed) ^ epoch) ^ index)) {}

  uint64_t next() noexcept {
    state_ += 0x9e3779b97f4a7c15ULL;
    return mix64(state_ - 0x9e3779b97f4a7c15ULL);
  }
  /// Uniform in [0, 1).
  double uniform() noexcept {
    return static_cast<double>(next() >> 11) * 0x1.0p-53;
  }
  double uniform(double lo, double hi) noexcept {
    return lo + (hi - lo) * uniform();
  }
  /// Uniform integer in [0, n); n > 0.
  uint64_t below(uint64_t n) noexcept { return next() % n; }
  /// The generator's whole state: record_rng{state()} continues the same
  /// sequence (checkpoints).
  uint64_t state() const noexcept { return state_; }

private:
  uint64_t state_;
};

} // namespace af
