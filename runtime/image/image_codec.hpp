// Image decoding for every format image_decode takes: JPEG (runtime/image/jpeg.hpp,
// libjpeg-turbo), PNG (libspng) and WebP (libwebp). The format comes from
// the bytes themselves, never from a file name: JPEG starts FF D8 FF, PNG
// with its 8-byte signature, WebP with "RIFF" size "WEBP".
//
// Every format gets the same checks and the same error wording: the header
// is read first, an image without pixels or with more than max_pixels is
// refused before anything is allocated for its pixels, and a corrupt image
// is an error naming the format, never a crash.
//
// JPEGs decode less (DCT scaling, only the crop's window); PNG and WebP
// decode whole at full size, and the caller resamples the crop as for a
// JPEG. 16-bit PNGs keep their high byte; alpha is dropped (a transparent
// pixel gives its stored colour). Gray output from a colour PNG or WebP
// weighs R, G and B as libjpeg does (0.299, 0.587, 0.114).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "actorflow/runtime/image/jpeg.hpp"

namespace af {

enum class image_format : uint8_t { unknown, jpeg, png, webp };

/// The format of `data` by its first bytes.
image_format sniff_image(std::string_view data) noexcept;
/// "JPEG", "PNG", "WebP"; "unknown".
const char* image_format_name(image_format f) noexcept;

struct image_info {
  image_format format = image_format::unknown;
  int width = 0;
  int height = 0;
};

class image_codec {
public:
  /// Reads the format and size. False (with error()) for bytes of no format
  /// it knows, or a header that does not parse.
  bool header(std::string_view data, image_info& out);

  /// Decodes `data`, whose header() gave `info`, for resampling `box`
  /// (pixels of the full-size image) to out_width x out_height with
  /// `channels` (1 or 3). JPEG: decode_window(), or decode_whole() when
  /// `full_decode`, which may scale `box`; PNG and WebP: the whole image,
  /// `box` unchanged. Refuses images without pixels or with more than
  /// `max_pixels`. False (with error()) on failure.
  bool decode(const image_info& info, std::string_view data, int channels,
              uint64_t max_pixels, int out_width, int out_height,
              crop_box& box, image& out, bool fast_dct = false,
              bool full_decode = false);

  /// Decodes the whole image at full size (PNG and WebP as decode(); JPEG
  /// through jpeg_codec::decode).
  bool decode_full(std::string_view data, int channels, uint64_t max_pixels,
                   image& out);

  const std::string& error() const noexcept { return error_; }

private:
  bool check(const image_info& info, int channels, uint64_t max_pixels);
  bool decode_png(const image_info& info, std::string_view data, int channels,
                  image& out);
  bool decode_webp(const image_info& info, std::string_view data,
                   int channels, image& out);

  jpeg_codec jpeg_;
  std::string error_;
};

} // namespace af
