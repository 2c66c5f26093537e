// padded_batch: batches records whose variable-length fields differ in
// length, as tf.data's padded_batch and bucket_by_sequence_length do. Each
// fixed-size field of rank >= 2 is padded along its first inner dimension
// to the batch's longest record (runtime/core/rows.hpp, gather_padded; a field
// X with "X_length" is cut to the longest length, and padding_value fills
// every value past a record's length). With bucket_boundaries, records go
// to buckets by length_field, and each bucket batches on its own; each
// epoch's remainders go out at its end, bucket by bucket (or are dropped).
// Config: topology.PaddedBatchConfig.
#pragma once

#include "actorflow/runtime/stage/registry.hpp"

namespace af {

stage_type padded_batch_type();

} // namespace af
