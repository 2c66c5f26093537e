// unbatch: splits each record along its first inner dimension, as
// tf.data's unbatch() splits elements: fields of shape [n, m, ...] become
// [n * m, ...] (the same bytes, not copied), and fields with one value per
// record ([n]: labels, keys, record indices) repeat it m times. Every field
// of rank 2 or more must have the same m. One item out per item in.
// Config: topology.UnbatchConfig (no fields).
#pragma once

#include "actorflow/runtime/stage/registry.hpp"

namespace af {

stage_type unbatch_type();

} // namespace af
