// The parameter-server protocol's partitioning: how variables are sliced
// over the shards (ps_dense_slice, ps_row_shard). Declared in
// runtime/protocol/ps.hpp.
#include "actorflow/runtime/protocol/ps.hpp"

#include "actorflow/runtime/core/random.hpp"

namespace af {

ps_range ps_dense_slice(uint64_t elements, uint32_t shard, uint32_t shards) {
  uint64_t base = elements / shards;
  uint64_t extra = elements % shards;
  uint64_t lo = shard * base + (shard < extra ? shard : extra);
  uint64_t hi = lo + base + (shard < extra ? 1 : 0);
  return {lo, hi};
}

uint32_t ps_row_shard(int64_t row, uint32_t shards) {
  return static_cast<uint32_t>(mix64(static_cast<uint64_t>(row)) % shards);
}

} // namespace af
