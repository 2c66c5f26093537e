// af::device_memory: accelerator memory that an af::buffer
// (runtime/core/tensor.hpp) can hold its bytes in. Kept apart from tensor.hpp so
// that the compute layer (gpu/), which knows nothing of CAF, can make it.
#pragma once

#include <cstddef>

namespace af {

/// Accelerator memory that holds a buffer's bytes (gpu/: the output of
/// image_decode on a GPU). The runtime knows it through this interface
/// only; the memory is complete (its writes finished) when the buffer is
/// made, and is read-only afterwards.
class device_memory {
public:
  virtual ~device_memory() = default;
  /// The device's ordinal (the N of "cuda:N").
  virtual int ordinal() const noexcept = 0;
  /// The device pointer.
  virtual const void* pointer() const noexcept = 0;
  /// Copies the first `bytes` bytes into host memory `dst`. Throws
  /// std::runtime_error when the device fails.
  virtual void copy_to_host(std::byte* dst, size_t bytes) const = 0;
};

} // namespace af
