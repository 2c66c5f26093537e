// JPEG decoding and encoding through libjpeg-turbo's TurboJPEG API. Declared
// in runtime/image/jpeg.hpp.
#include "actorflow/runtime/image/jpeg.hpp"

#include <algorithm>
#include <cmath>

#include <turbojpeg.h>

namespace af {

jpeg_codec::jpeg_codec() = default;

// window_decoder is complete in jpeg_window.cpp, which defines the
// destructor's part for it (destroy_window).
jpeg_codec::~jpeg_codec() {
  destroy_window();
  if (decompressor_ != nullptr)
    tjDestroy(decompressor_);
  if (compressor_ != nullptr)
    tjDestroy(compressor_);
}

bool jpeg_codec::header(std::string_view data, jpeg_info& out) {
  if (decompressor_ == nullptr)
    decompressor_ = tjInitDecompress();
  if (decompressor_ == nullptr) {
    error_ = "cannot initialise the JPEG decoder";
    return false;
  }
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  if (data.empty()
      || tjDecompressHeader3(
           decompressor_,
           reinterpret_cast<const unsigned char*>(data.data()),
           static_cast<unsigned long>(data.size()), &w, &h, &subsamp,
           &colorspace)
           != 0) {
    error_ = std::string{"not a JPEG image: "}
             + (data.empty() ? "no data" : tjGetErrorStr2(decompressor_));
    return false;
  }
  out.width = w;
  out.height = h;
  return true;
}

bool jpeg_codec::decode(std::string_view data, int channels,
                        uint64_t max_pixels, image& out, int min_width,
                        int min_height, bool fast_dct) {
  jpeg_info info;
  return header(data, info)
         && decode_from(info, data, channels, max_pixels, out, min_width,
                        min_height, fast_dct);
}

bool jpeg_codec::decode_from(const jpeg_info& info, std::string_view data,
                             int channels, uint64_t max_pixels, image& out,
                             int min_width, int min_height, bool fast_dct) {
  if (!check(info, channels, max_pixels))
    return false;
  // The smallest scale (fewest pixels) that still covers the target.
  int n = 0;
  auto* factors = tjGetScalingFactors(&n);
  int w = info.width, h = info.height;
  for (int i = 0; i < n; ++i) {
    auto f = factors[i];
    int sw = TJSCALED(info.width, f);
    int sh = TJSCALED(info.height, f);
    if (f.num <= f.denom && f.num * 2 <= f.denom && sw >= min_width
        && sh >= min_height && min_width > 0 && min_height > 0
        && static_cast<int64_t>(sw) * sh < static_cast<int64_t>(w) * h) {
      w = sw;
      h = sh;
    }
  }
  out.width = w;
  out.height = h;
  out.channels = channels;
  out.left = out.top = out.full_width = out.full_height = 0;
  out.pixels.resize(static_cast<size_t>(w) * h * channels);
  int flags = fast_dct ? (TJFLAG_FASTDCT | TJFLAG_FASTUPSAMPLE) : 0;
  if (tjDecompress2(decompressor_,
                    reinterpret_cast<const unsigned char*>(data.data()),
                    static_cast<unsigned long>(data.size()),
                    out.pixels.data(), w, 0, h,
                    channels == 1 ? TJPF_GRAY : TJPF_RGB, flags)
      != 0) {
    // Warnings (e.g. extraneous bytes) still produce an image.
    if (tjGetErrorCode(decompressor_) != TJERR_WARNING) {
      error_ = std::string{"cannot decode the JPEG image: "}
               + tjGetErrorStr2(decompressor_);
      return false;
    }
  }
  return true;
}

bool jpeg_codec::decode_whole(std::string_view data, int channels,
                              uint64_t max_pixels, int out_width,
                              int out_height, crop_box& box, image& out,
                              bool fast_dct) {
  jpeg_info info;
  return header(data, info)
         && decode_whole(info, data, channels, max_pixels, out_width,
                         out_height, box, out, fast_dct);
}

bool jpeg_codec::decode_whole(const jpeg_info& info, std::string_view data,
                              int channels, uint64_t max_pixels, int out_width,
                              int out_height, crop_box& box, image& out,
                              bool fast_dct) {
  int min_w = static_cast<int>(
    std::ceil(out_width * info.width / std::max(box.width, 1.0)));
  int min_h = static_cast<int>(
    std::ceil(out_height * info.height / std::max(box.height, 1.0)));
  if (!decode_from(info, data, channels, max_pixels, out, min_w, min_h,
                   fast_dct))
    return false;
  if (out.width != info.width || out.height != info.height) {
    double sx = static_cast<double>(out.width) / info.width;
    double sy = static_cast<double>(out.height) / info.height;
    box = crop_box{box.x * sx, box.y * sy, box.width * sx, box.height * sy};
  }
  return true;
}

std::string image_refusal(int width, int height, int channels,
                          uint64_t max_pixels) {
  auto size = std::to_string(width) + "x" + std::to_string(height);
  if (width < 1 || height < 1)
    return "image of " + size + " has no pixels";
  if (static_cast<uint64_t>(width) * static_cast<uint64_t>(height)
      > max_pixels)
    return "image of " + size + " exceeds the limit of "
           + std::to_string(max_pixels) + " pixels";
  if (channels != 1 && channels != 3)
    return "channels must be 1 or 3";
  return {};
}

bool jpeg_codec::check(const jpeg_info& info, int channels,
                       uint64_t max_pixels) {
  error_ = image_refusal(info.width, info.height, channels, max_pixels);
  return error_.empty();
}

bool jpeg_codec::encode(const uint8_t* pixels, int width, int height,
                        int channels, int quality, std::string& out) {
  if (compressor_ == nullptr)
    compressor_ = tjInitCompress();
  if (compressor_ == nullptr) {
    error_ = "cannot initialise the JPEG encoder";
    return false;
  }
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  if (tjCompress2(compressor_, pixels, width, 0, height,
                  channels == 1 ? TJPF_GRAY : TJPF_RGB, &buf, &size,
                  channels == 1 ? TJSAMP_GRAY : TJSAMP_420, quality, 0)
      != 0) {
    error_ = std::string{"cannot encode JPEG: "} + tjGetErrorStr2(compressor_);
    if (buf != nullptr)
      tjFree(buf);
    return false;
  }
  out.assign(reinterpret_cast<const char*>(buf), size);
  tjFree(buf);
  return true;
}

} // namespace af
