// JPEG decoding and encoding through libjpeg-turbo's TurboJPEG API.
//
// Decoding reads the header first and refuses images above a pixel limit
// before allocating anything, and can let the decoder scale the image down
// by 1/2, 1/4 or 1/8 in the DCT (much cheaper than decoding at full size and
// resizing) when the caller needs less than half the size.
//
// decode_window() decodes less: only the rows and columns a crop needs, at
// the same DCT scale (libjpeg's jpeg_crop_scanline and jpeg_skip_scanlines;
// the TurboJPEG API of libjpeg-turbo 2.1 cannot crop).
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
  // Where these pixels lie in the whole (scaled) image, when they are a
  // window of it (decode_window): its first column and row, and the whole
  // image's size (0: width and height, the pixels are the whole image).
  int left = 0, top = 0;
  int full_width = 0, full_height = 0;
};

/// A rectangle in pixels of an image.
struct crop_box {
  double x = 0, y = 0, width = 0, height = 0;
};

struct jpeg_info {
  int width = 0;
  int height = 0;
};

/// What every decoder refuses before it allocates pixels (the same words
/// for every format): no pixels, more than `max_pixels`, channels other
/// than 1 or 3. "" when none applies.
std::string image_refusal(int width, int height, int channels,
                          uint64_t max_pixels);

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

  /// Decodes the whole image for resampling `box` (pixels of the
  /// full-size image) to out_width x out_height: scaled in the DCT by 1/2,
  /// 3/8, 1/4 or 1/8 (the smallest that leaves the box at least that
  /// size), or not; `box` is scaled to the decoded size.
  bool decode_whole(std::string_view data, int channels, uint64_t max_pixels,
                    int out_width, int out_height, crop_box& box, image& out,
                    bool fast_dct = false);
  /// decode_whole() of `data` whose header() gave `info`: the header is not
  /// parsed again (for a 28 x 28 image, one parse is a sixth of the work).
  bool decode_whole(const jpeg_info& info, std::string_view data,
                    int channels, uint64_t max_pixels, int out_width,
                    int out_height, crop_box& box, image& out,
                    bool fast_dct = false);

  /// Decodes what resampling `box` (pixels of the full-size image) to
  /// out_width x out_height reads: the image scaled in the DCT by the
  /// smallest n/8 (n <= largest_eighths, or 1) that keeps the box at least
  /// that size, and of it only the box's rows and columns with one more on
  /// each side. `out` holds that window and its place; `box` is scaled to
  /// the decoded size. With largest_eighths 4, the scales and so the
  /// resampled bytes are decode_whole()'s. The data below the window is
  /// not read (damage there goes unnoticed). Refusals and errors as
  /// decode().
  bool decode_window(std::string_view data, int channels, uint64_t max_pixels,
                     int out_width, int out_height, crop_box& box,
                     image& out, bool fast_dct = false,
                     int largest_eighths = 4);
  /// decode_window() of `data` whose header() gave `info`.
  bool decode_window(const jpeg_info& info, std::string_view data,
                     int channels, uint64_t max_pixels, int out_width,
                     int out_height, crop_box& box, image& out,
                     bool fast_dct = false, int largest_eighths = 4);

  /// Encodes `pixels` (height x width x channels, channels 1 or 3).
  bool encode(const uint8_t* pixels, int width, int height, int channels,
              int quality, std::string& out);

  const std::string& error() const noexcept { return error_; }

private:
  bool check(const jpeg_info& info, int channels, uint64_t max_pixels);
  // decode() of `data`, whose header() gave `info`: each parse of the
  // header costs, and a 28 x 28 image is mostly header.
  bool decode_from(const jpeg_info& info, std::string_view data, int channels,
                   uint64_t max_pixels, image& out, int min_width,
                   int min_height, bool fast_dct);
  void destroy_window() noexcept;
  struct window_decoder; // libjpeg state for decode_window
  window_decoder* window_ = nullptr; // owned; freed by destroy_window
  void* decompressor_ = nullptr;
  void* compressor_ = nullptr;
  std::string error_;
};

} // namespace af
