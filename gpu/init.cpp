// Parameter sizes and deterministic initialisation (shared by the shards,
// which own the values, and the tests).
#include <cstring>
#include <string_view>

#include "actorflow/gpu/model.hpp"
#include "actorflow/runtime/core/random.hpp"

namespace af::gpu {

int64_t param_spec::size() const noexcept {
  int64_t n = 1;
  for (auto d : shape)
    n *= d;
  return n;
}

int64_t param_spec::row_size() const noexcept {
  return shape.empty() ? 1 : shape.back();
}

namespace {

uint64_t hash_name(std::string_view s) noexcept {
  uint64_t h = 0xcbf29ce484222325ULL; // FNV-1a
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

} // namespace

param_store::~param_store() = default;

float initial_value(const param_spec& p, uint64_t seed, uint64_t element) {
  if (p.initial)
    return (*p.initial)[element];
  if (p.init_limit == 0)
    return 0.0f;
  record_rng rng{seed, hash_name(p.name), element};
  return static_cast<float>(rng.uniform(-p.init_limit, p.init_limit));
}

} // namespace af::gpu
