// Image decoding for every format image_decode takes: JPEG
// (runtime/image/jpeg.hpp, libjpeg-turbo), PNG (libspng) and WebP (libwebp).
// Declared in runtime/image/image_codec.hpp.
#include "actorflow/runtime/image/image_codec.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>

#include <spng.h>
#include <webp/decode.h>

namespace af {

namespace {

// Colour to gray with libjpeg's weights and rounding (jccolor.c: 0.299,
// 0.587, 0.114 in 16-bit fixed point), so that R = G = B stays exact.
void rgb_to_gray(const uint8_t* rgb, size_t pixels, uint8_t* gray) {
  for (size_t i = 0; i < pixels; ++i, rgb += 3)
    gray[i] = static_cast<uint8_t>(
      (19595u * rgb[0] + 38470u * rgb[1] + 7471u * rgb[2] + 32768u) >> 16);
}

// An RGB image of info's size decoded into `out` with `channels`: in place
// for 3, through `rgb` for 1.
template <class Decode>
bool decode_rgb(const image_info& info, int channels, image& out,
                std::vector<uint8_t>& rgb, Decode&& decode) {
  auto pixels = static_cast<size_t>(info.width) * info.height;
  out.width = info.width;
  out.height = info.height;
  out.channels = channels;
  out.left = out.top = out.full_width = out.full_height = 0;
  out.pixels.resize(pixels * channels);
  if (channels == 3)
    return decode(out.pixels.data(), out.pixels.size());
  rgb.resize(pixels * 3);
  if (!decode(rgb.data(), rgb.size()))
    return false;
  rgb_to_gray(rgb.data(), pixels, out.pixels.data());
  return true;
}

const char* webp_status(VP8StatusCode s) {
  switch (s) {
    case VP8_STATUS_OK: return "ok";
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE:
      return "unsupported feature (an animation?)";
    case VP8_STATUS_SUSPENDED: return "suspended";
    case VP8_STATUS_USER_ABORT: return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "not enough data (cut short?)";
  }
  return "unknown error";
}

struct spng_free {
  void operator()(spng_ctx* c) const noexcept { spng_ctx_free(c); }
};
using spng_ptr = std::unique_ptr<spng_ctx, spng_free>;

// A decoding context over `data` with bounded chunk memory: a PNG's
// ancillary chunks cannot claim more than the file's own size.
spng_ptr png_context(std::string_view data, int& err) {
  spng_ptr ctx{spng_ctx_new(0)};
  if (!ctx) {
    err = SPNG_EMEM;
    return ctx;
  }
  // (libspng refuses limits above 2^31 - 1, its own chunk maximum.)
  auto limit = std::min<size_t>(data.size() + 1024, 0x7fffffff);
  err = spng_set_chunk_limits(ctx.get(), limit, limit);
  if (err == 0)
    err = spng_set_png_buffer(ctx.get(), data.data(), data.size());
  return ctx;
}

} // namespace

image_format sniff_image(std::string_view d) noexcept {
  auto u = [&](size_t i) { return static_cast<unsigned char>(d[i]); };
  if (d.size() >= 3 && u(0) == 0xff && u(1) == 0xd8 && u(2) == 0xff)
    return image_format::jpeg;
  if (d.size() >= 8 && d.substr(0, 8) == std::string_view{"\x89PNG\r\n\x1a\n", 8})
    return image_format::png;
  if (d.size() >= 12 && d.substr(0, 4) == "RIFF" && d.substr(8, 4) == "WEBP")
    return image_format::webp;
  return image_format::unknown;
}

const char* image_format_name(image_format f) noexcept {
  switch (f) {
    case image_format::jpeg: return "JPEG";
    case image_format::png: return "PNG";
    case image_format::webp: return "WebP";
    case image_format::unknown: break;
  }
  return "unknown";
}

bool image_codec::header(std::string_view data, image_info& out) {
  out = image_info{};
  out.format = sniff_image(data);
  switch (out.format) {
    case image_format::jpeg: {
      jpeg_info j;
      if (!jpeg_.header(data, j)) {
        error_ = jpeg_.error();
        return false;
      }
      out.width = j.width;
      out.height = j.height;
      return true;
    }
    case image_format::png: {
      int err = 0;
      auto ctx = png_context(data, err);
      spng_ihdr ihdr{};
      if (err == 0)
        err = spng_get_ihdr(ctx.get(), &ihdr);
      if (err != 0) {
        error_ = std::string{"not a PNG image: "} + spng_strerror(err);
        return false;
      }
      out.width = static_cast<int>(ihdr.width);
      out.height = static_cast<int>(ihdr.height);
      return true;
    }
    case image_format::webp: {
      WebPBitstreamFeatures f;
      auto s = WebPGetFeatures(reinterpret_cast<const uint8_t*>(data.data()),
                               data.size(), &f);
      if (s != VP8_STATUS_OK) {
        error_ = std::string{"not a WebP image: "} + webp_status(s);
        return false;
      }
      out.width = f.width;
      out.height = f.height;
      return true;
    }
    case image_format::unknown: break;
  }
  char first[3 * 8 + 1] = "";
  for (size_t i = 0; i < std::min<size_t>(data.size(), 8); ++i)
    std::snprintf(first + 3 * i, 4, " %02x",
                  static_cast<unsigned char>(data[i]));
  error_ = data.empty() ? "not an image: no data"
                        : std::string{"not a JPEG, PNG or WebP image (it "
                                      "starts"}
                            + first + ")";
  return false;
}

bool image_codec::check(const image_info& info, int channels,
                        uint64_t max_pixels) {
  error_ = image_refusal(info.width, info.height, channels, max_pixels);
  return error_.empty();
}

bool image_codec::decode(const image_info& info, std::string_view data,
                         int channels, uint64_t max_pixels, int out_width,
                         int out_height, crop_box& box, image& out,
                         bool fast_dct, bool full_decode) {
  if (info.format == image_format::jpeg) {
    jpeg_info j{info.width, info.height};
    bool ok = full_decode
                ? jpeg_.decode_whole(j, data, channels, max_pixels, out_width,
                                     out_height, box, out, fast_dct)
                : jpeg_.decode_window(j, data, channels, max_pixels,
                                      out_width, out_height, box, out,
                                      fast_dct);
    if (!ok)
      error_ = jpeg_.error();
    return ok;
  }
  if (!check(info, channels, max_pixels))
    return false;
  return info.format == image_format::png
           ? decode_png(info, data, channels, out)
           : decode_webp(info, data, channels, out);
}

bool image_codec::decode_full(std::string_view data, int channels,
                              uint64_t max_pixels, image& out) {
  image_info info;
  if (!header(data, info))
    return false;
  if (info.format == image_format::jpeg) {
    if (!jpeg_.decode(data, channels, max_pixels, out)) {
      error_ = jpeg_.error();
      return false;
    }
    return true;
  }
  auto box = crop_box{0, 0, static_cast<double>(info.width),
                      static_cast<double>(info.height)};
  return decode(info, data, channels, max_pixels, info.width, info.height,
                box, out);
}

bool image_codec::decode_png(const image_info& info, std::string_view data,
                             int channels, image& out) {
  std::vector<uint8_t> rgb;
  int err = 0;
  auto ctx = png_context(data, err);
  size_t need = 0;
  if (err == 0)
    err = spng_decoded_image_size(ctx.get(), SPNG_FMT_RGB8, &need);
  if (err == 0
      && need != static_cast<size_t>(info.width) * info.height * 3)
    err = SPNG_EOVERFLOW;
  if (err == 0)
    decode_rgb(info, channels, out, rgb, [&](uint8_t* px, size_t n) {
      err = spng_decode_image(ctx.get(), px, n, SPNG_FMT_RGB8, 0);
      return err == 0;
    });
  if (err != 0) {
    error_ = std::string{"cannot decode the PNG image: "} + spng_strerror(err);
    return false;
  }
  return true;
}

bool image_codec::decode_webp(const image_info& info, std::string_view data,
                              int channels, image& out) {
  std::vector<uint8_t> rgb;
  VP8StatusCode status = VP8_STATUS_OK;
  bool ok = decode_rgb(info, channels, out, rgb, [&](uint8_t* px, size_t n) {
    WebPDecoderConfig config;
    if (!WebPInitDecoderConfig(&config)) {
      status = VP8_STATUS_INVALID_PARAM;
      return false;
    }
    config.output.colorspace = MODE_RGB;
    config.output.is_external_memory = 1;
    config.output.u.RGBA.rgba = px;
    config.output.u.RGBA.stride = info.width * 3;
    config.output.u.RGBA.size = n;
    status = WebPDecode(reinterpret_cast<const uint8_t*>(data.data()),
                        data.size(), &config);
    WebPFreeDecBuffer(&config.output);
    return status == VP8_STATUS_OK;
  });
  if (!ok) {
    error_ = std::string{"cannot decode the WebP image: "}
             + webp_status(status);
    return false;
  }
  return true;
}

} // namespace af
