// batcher: re-chunks incoming items into batches of exactly `batch_size`
// records, one contiguous tensor per field. An item that already is one full
// batch, arriving while nothing is pending, is forwarded without a copy. At
// the end of each epoch (and of the stream) the remainder goes out as a
// smaller batch unless drop_remainder is set. All items must carry the same
// fields with the same dtype and per-record shape. Config:
// topology.BatcherConfig.
#pragma once

#include "actorflow/runtime/stage/registry.hpp"

namespace af {

stage_type batcher_type();

} // namespace af
