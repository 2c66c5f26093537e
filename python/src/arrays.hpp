// Tensors as NumPy arrays without a copy, and DLPack capsules of such
// arrays (for torch.from_dlpack and jax.dlpack).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "actorflow/runtime/core/batch.hpp"

namespace af::py {

/// A read-only NumPy array over the tensor's buffer, which the array keeps
/// alive (its base is a capsule that shares the buffer). dtype::bytes
/// tensors come as object arrays of `bytes` (copied: strings of many
/// lengths have no strided layout); bf16 as uint16 (the raw bits).
pybind11::array to_numpy(const tensor& t);

/// A dict of the batch's fields, in the batch's order.
pybind11::dict to_dict(const batch& b);

/// A "dltensor" capsule over `array`'s memory (no copy) that keeps `array`
/// alive until the consumer lets go. `bf16`: the uint16 elements are
/// bfloat16 (when 2 bytes wide). Throws pybind11::buffer_error
/// (BufferError) for object arrays and strides that are not whole
/// elements.
pybind11::capsule to_dlpack(const pybind11::array& array, bool bf16);

} // namespace af::py
