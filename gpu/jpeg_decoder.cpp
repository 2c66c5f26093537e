// Decoding JPEG batches on a GPU (nvJPEG) for image_decode's `device:
// "cuda"`: each image is decoded at full size, then cropped, resized,
// flipped and normalized by one kernel for the whole batch. Declared in
// gpu/jpeg_decoder.hpp.
#include "actorflow/gpu/jpeg_decoder.hpp"

#include <stdexcept>

namespace af::gpu {

jpeg_decoder::~jpeg_decoder() = default;

#ifndef AF_HAVE_NVJPEG
// Built with nvJPEG, gpu/cuda/nvjpeg_decoder.cu provides these.
namespace {
constexpr const char* no_nvjpeg_reason =
  "this build has no nvJPEG decoder (the CUDA device was not built, or "
  "nvjpeg.h and libnvjpeg were not found: see gpu/README.md)";
} // namespace

bool nvjpeg_available(std::string* why) {
  if (why != nullptr)
    *why = no_nvjpeg_reason;
  return false;
}

std::unique_ptr<jpeg_decoder> make_nvjpeg_decoder(int) {
  throw std::runtime_error(no_nvjpeg_reason);
}
#endif

} // namespace af::gpu
