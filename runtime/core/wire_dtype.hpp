// The dtype of values on the parameter-server wire (Training.ps.wire):
// gradients and parameters may travel in 16 bits while the shards keep
// f32 master values. Converting is one pass over the values, through
// Eigen's bfloat16 and half types.
#pragma once

#include <optional>
#include <string>

#include "actorflow/runtime/core/tensor.hpp"

namespace af {

/// "f32", "bf16" or "f16" as a dtype; nullopt for anything else.
std::optional<dtype> wire_dtype_of(const std::string& name);

/// `values` (f32) as `to`: itself for f32; bf16 rounds to nearest even
/// (f32's range, 8 bits of mantissa); f16 rounds to nearest even and
/// saturates at +-65504, f16's largest finite value, so that a large
/// finite value stays finite. NaN stays NaN. Throws std::invalid_argument
/// when `values` is not f32 or `to` is none of the three.
tensor narrow_values(const tensor& values, dtype to);

/// `values` as f32: itself when it is f32; bf16 and f16 widen exactly.
/// Throws std::invalid_argument for any other dtype.
tensor widen_values(const tensor& values);

} // namespace af
