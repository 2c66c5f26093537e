// JPEG decoding and encoding through libjpeg-turbo's TurboJPEG API.
//
// Decoding reads the header first and refuses images above a pixel limit
// before allocating anything, and can let the decoder scale the image down
// by 1/2, 1/4 or 1/8 in the DCT (much cheaper than decoding at full size and
// resizing) when the caller needs less than half the size.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace af {

struct image {
  int width = 0;
  int height = 0;
  int channels = 0;  // 1 (gray) or 3 (RGB)
  std::vector<uint8_t> pixels;  // height x width x channels, row-major
};

struct jpeg_info {
  int width = 0;
  int height = 0;
};

class jpeg_codec {
public:
  jpeg_codec();
  ~jpeg_codec();
  jpeg_codec(const jpeg_codec&) = delete;
  jpeg_codec& operator=(const jpeg_codec&) = delete;

  /// Reads the header. False (with error()) if `data` is not a JPEG.
  bool header(std::string_view data, jpeg_info& out);

  /// Decodes `data` into `out` with `channels` (1 or 3). The image is scaled
  /// down in the DCT by the largest factor that keeps it at least
  /// `min_width` x `min_height` (0: full size). Refuses images with more
  /// than `max_pixels` pixels. False (with error()) on failure.
  bool decode(std::string_view data, int channels, uint64_t max_pixels,
              image& out, int min_width = 0, int min_height = 0,
              bool fast_dct = false);

  /// Encodes `pixels` (height x width x channels, channels 1 or 3).
  bool encode(const uint8_t* pixels, int width, int height, int channels,
              int quality, std::string& out);

  const std::string& error() const noexcept { return error_; }

private:
  void* decompressor_ = nullptr;
  void* compressor_ = nullptr;
  std::string error_;
};

} // namespace af
