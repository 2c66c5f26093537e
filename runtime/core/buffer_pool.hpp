// Recycling of large tensor buffers.
//
// A batch of 64 decoded 224x224 RGB images is 38 MB. Allocations that large
// come straight from the kernel (mmap) and every page faults on first
// touch, which cost an image pipeline more than a tenth of its CPU in
// bench/input_pipeline. Buffers of at least `min_pooled_bytes` are
// therefore kept after use, up to a limit, and handed out again for the
// next tensor of the same size: their pages stay mapped. Only fixed-shape
// tensors (tensor::allocate) use the pool; byte strings come in sizes that
// rarely recur. (A Fashion-MNIST
// batch of 64 float images is 200 KB, so the pool starts at 128 KiB.)
#pragma once

#include <cstddef>

namespace af::buffer_pool {

/// Buffers smaller than this are never pooled: glibc serves them from its
/// heap; from this size on it maps fresh pages (its mmap threshold).
constexpr size_t min_pooled_bytes = size_t{128} << 10;

/// A pooled block of exactly `size` bytes, or nullptr.
void* take(size_t size) noexcept;
/// Keeps `p` (of `size` bytes) for reuse; false if the pool is full or
/// `size` is too small to pool, in which case the caller frees it.
bool give(void* p, size_t size) noexcept;
/// Most bytes kept at once (default 256 MiB). 0 disables pooling; lowering
/// the limit frees what no longer fits.
void set_limit(size_t bytes);
size_t limit() noexcept;
/// Bytes currently kept.
size_t pooled_bytes() noexcept;

} // namespace af::buffer_pool
