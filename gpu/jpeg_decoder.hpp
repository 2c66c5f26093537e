// Decoding JPEG batches on a GPU (nvJPEG) for image_decode's
// `device: "cuda"`: each image is decoded at full size, then cropped,
// resized, flipped and normalized by one kernel for the whole batch, into
// device memory that a trainer on the same GPU reads in place.
//
// The caller computes where each output pixel samples its image
// (runtime/image/image_ops.hpp's map_axis, from the crop box and flip), so that
// the kernel's arithmetic is the CPU path's: the same float operations in
// the same order, without fused multiply-adds. Output differs from the CPU
// path only where nvJPEG's IDCT and chroma upsampling differ from
// libjpeg-turbo's, and where the CPU path scales down in the DCT (nvJPEG
// always decodes at full size).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "actorflow/runtime/core/device_memory.hpp"

namespace af::gpu {

/// One image of a batch: its bytes, the size its header gives, and where
/// each output pixel samples it. The maps hold the output's width (x) and
/// height (y) entries; they and `data` must stay valid during decode().
struct jpeg_job {
  std::string_view data;
  int width = 0, height = 0;
  const int* x_lo = nullptr;
  const int* x_hi = nullptr;
  const float* x_frac = nullptr;
  const int* y_lo = nullptr;
  const int* y_hi = nullptr;
  const float* y_frac = nullptr;
};

/// What every image becomes: [height, width, channels] of u8 (rounded, as
/// resample_u8) or f32 (v * scale[c] + shift[c], as resample_f32 with
/// scale = 1 / (255 std), shift = -mean / std).
struct jpeg_output {
  int height = 0, width = 0, channels = 3;
  bool as_u8 = false;
  float scale[3] = {1, 1, 1};
  float shift[3] = {0, 0, 0};

  size_t image_bytes() const noexcept {
    return static_cast<size_t>(height) * width * channels
           * (as_u8 ? 1 : sizeof(float));
  }
};

class jpeg_decoder {
public:
  virtual ~jpeg_decoder();

  /// "nvJPEG 13.3 on cuda:0 (NVIDIA H200)".
  virtual std::string name() const = 0;
  virtual int ordinal() const noexcept = 0;

  /// Decodes `jobs` into new device memory holding jobs.size() images of
  /// `out` back to back, complete when it returns. The indices of images
  /// the GPU could not decode (not a JPEG it supports, a size other than
  /// the job's, a corrupt stream) go to `failed`, in order; their part of
  /// the memory is left unwritten (the caller decodes them on the CPU, for
  /// its result or its error). Throws std::runtime_error when the device
  /// fails.
  virtual std::shared_ptr<device_memory>
  decode(const std::vector<jpeg_job>& jobs, const jpeg_output& out,
         std::vector<size_t>& failed) = 0;

  /// Copies `bytes` bytes of host memory into `mem` (from decode()) at
  /// byte `offset`: an image the caller decoded on the CPU.
  virtual void write(const device_memory& mem, size_t offset,
                     const void* src, size_t bytes) = 0;
};

/// Whether nvJPEG was built in and a GPU is present; when false, `why`
/// says what is missing.
bool nvjpeg_available(std::string* why = nullptr);

/// The decoder on GPU `ordinal`, with its own stream. Throws
/// std::runtime_error when nvjpeg_available() is false.
std::unique_ptr<jpeg_decoder> make_nvjpeg_decoder(int ordinal);

} // namespace af::gpu
