// numeric: per-feature transforms of numeric fields, as tf.feature_column's
// numeric_column(normalizer_fn=...) and bucketized_column, or Keras's
// Normalization and Discretization layers with fixed parameters. Each
// configured feature reads a field (f32, f64, i64, i32 or u8, any shape;
// u8 is not scaled) and applies its ops in order, each to the previous
// one's result:
//
//   log1p        ln(1 + x); a value <= -1 fails the stage (af::input_error)
//                naming the field and the record
//   standardize  (x - mean) / std
//   bucketize    the number of boundaries <= x, as tf.raw_ops.Bucketize
//                (NaN: the last bucket); last in a chain only
//
// Values are widened to double (i64 beyond 2^53 rounds), computed in double
// and written once: f32 of the input's shape, or i64 bucket indices after
// bucketize. The output replaces the input unless `output` names another
// field; every feature reads the item as it came in, and the other fields
// pass through. Config: topology.NumericConfig.
#pragma once

#include "actorflow/runtime/stage/registry.hpp"

namespace af {

stage_type numeric_type();

} // namespace af
