// shuffle: record-level shuffle through a buffer of buffer_size records, as
// tf.data's shuffle: each output record is drawn at random from the buffer,
// which refills from the input. Output items hold records_per_item records.
// The buffer drains at the end of each epoch, so epochs do not mix. The
// order depends only on the job seed, the epoch (unless
// same_order_each_epoch) and the input order. Config: topology.ShuffleConfig.
#pragma once

#include "actorflow/runtime/stage/registry.hpp"

namespace af {

stage_type shuffle_type();

} // namespace af
