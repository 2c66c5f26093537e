// image_codec: PNG (libspng) and WebP (libwebp) next to JPEG, chosen by
// content. The images are encoded here with the libraries' own encoders, so
// the expected pixels are known exactly (PNG and lossless WebP).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <spng.h>
#include <webp/encode.h>

#include "actorflow/runtime/image/image_codec.hpp"
#include "actorflow/runtime/image/image_ops.hpp"

using namespace af;

namespace {

// A pattern that differs in every channel, row and column.
std::vector<uint8_t> pattern(int w, int h, int channels) {
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * channels);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < channels; ++c)
        px[(static_cast<size_t>(y) * w + x) * channels + c] =
          static_cast<uint8_t>(x * 7 + y * 13 + c * 71);
  return px;
}

// `pixels` in the PNG layout of `color_type` at `depth` bits (16-bit
// samples big-endian, as PNG stores them).
std::string png(int w, int h, uint8_t color_type, uint8_t depth,
                const std::vector<uint8_t>& pixels, bool interlaced = false) {
  spng_ctx* ctx = spng_ctx_new(SPNG_CTX_ENCODER);
  REQUIRE(ctx != nullptr);
  REQUIRE(spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1) == 0);
  spng_ihdr ihdr{};
  ihdr.width = static_cast<uint32_t>(w);
  ihdr.height = static_cast<uint32_t>(h);
  ihdr.color_type = color_type;
  ihdr.bit_depth = depth;
  ihdr.interlace_method = interlaced ? SPNG_INTERLACE_ADAM7
                                     : SPNG_INTERLACE_NONE;
  REQUIRE(spng_set_ihdr(ctx, &ihdr) == 0);
  REQUIRE(spng_encode_image(ctx, pixels.data(), pixels.size(), SPNG_FMT_PNG,
                            SPNG_ENCODE_FINALIZE)
          == 0);
  size_t len = 0;
  int err = 0;
  auto* buf = static_cast<char*>(spng_get_png_buffer(ctx, &len, &err));
  REQUIRE(err == 0);
  std::string out{buf, len};
  std::free(buf);
  spng_ctx_free(ctx);
  return out;
}

std::string webp(int w, int h, const std::vector<uint8_t>& rgb,
                 bool lossless) {
  uint8_t* out = nullptr;
  size_t n = lossless ? WebPEncodeLosslessRGB(rgb.data(), w, h, w * 3, &out)
                      : WebPEncodeRGB(rgb.data(), w, h, w * 3, 90, &out);
  REQUIRE(n > 0);
  std::string s{reinterpret_cast<char*>(out), n};
  WebPFree(out);
  return s;
}

uint8_t gray_of(const uint8_t* rgb) {
  return static_cast<uint8_t>(
    (19595u * rgb[0] + 38470u * rgb[1] + 7471u * rgb[2] + 32768u) >> 16);
}

image decoded(image_codec& codec, const std::string& data, int channels,
              uint64_t max_pixels = 1 << 30) {
  image_info info;
  REQUIRE(codec.header(data, info));
  auto box = full_image(info.width, info.height);
  image out;
  INFO(codec.error());
  REQUIRE(codec.decode(info, data, channels, max_pixels, info.width,
                       info.height, box, out));
  CHECK(out.width == info.width);
  CHECK(out.height == info.height);
  CHECK(out.channels == channels);
  return out;
}

} // namespace

TEST_CASE("images are told apart by their first bytes", "[image]") {
  auto rgb = pattern(5, 4, 3);
  CHECK(sniff_image(png(5, 4, SPNG_COLOR_TYPE_TRUECOLOR, 8, rgb))
        == image_format::png);
  CHECK(sniff_image(webp(5, 4, rgb, true)) == image_format::webp);
  CHECK(sniff_image(std::string("\xff\xd8\xff\xe0", 4)) == image_format::jpeg);
  CHECK(sniff_image("GIF89a") == image_format::unknown);
  CHECK(sniff_image("") == image_format::unknown);
  CHECK(sniff_image("RIFF\x10\0\0\0WAVE") == image_format::unknown);
  image_codec codec;
  image_info info;
  CHECK_FALSE(codec.header("GIF89a\x01\x02", info));
  CHECK(codec.error()
        == "not a JPEG, PNG or WebP image (it starts 47 49 46 38 39 61 01 "
           "02)");
  CHECK_FALSE(codec.header("", info));
  CHECK(codec.error() == "not an image: no data");
}

TEST_CASE("PNGs decode to their exact pixels in every colour type",
          "[image]") {
  int w = 29, h = 17;
  auto rgb = pattern(w, h, 3);
  auto gray = pattern(w, h, 1);
  image_codec codec;
  SECTION("RGB, plain and interlaced, as RGB and as gray") {
    for (bool interlaced : {false, true}) {
      auto file = png(w, h, SPNG_COLOR_TYPE_TRUECOLOR, 8, rgb, interlaced);
      CHECK(decoded(codec, file, 3).pixels == rgb);
      auto g = decoded(codec, file, 1);
      for (size_t i = 0; i < g.pixels.size(); ++i)
        REQUIRE(g.pixels[i] == gray_of(&rgb[i * 3]));
    }
  }
  SECTION("gray: the same values in every channel, and exact as gray") {
    auto file = png(w, h, SPNG_COLOR_TYPE_GRAYSCALE, 8, gray);
    CHECK(decoded(codec, file, 1).pixels == gray);
    auto c = decoded(codec, file, 3);
    for (size_t i = 0; i < gray.size(); ++i)
      REQUIRE((c.pixels[i * 3] == gray[i] && c.pixels[i * 3 + 1] == gray[i]
               && c.pixels[i * 3 + 2] == gray[i]));
  }
  SECTION("RGBA: alpha is dropped") {
    auto rgba = pattern(w, h, 4);
    auto c = decoded(codec, png(w, h, SPNG_COLOR_TYPE_TRUECOLOR_ALPHA, 8,
                                rgba),
                     3);
    for (size_t i = 0; i < static_cast<size_t>(w) * h; ++i)
      REQUIRE(std::memcmp(&c.pixels[i * 3], &rgba[i * 4], 3) == 0);
  }
  SECTION("16 bits per sample: the high byte") {
    // spng takes samples in the host's byte order for encoding.
    std::vector<uint8_t> wide(rgb.size() * 2);
    for (size_t i = 0; i < rgb.size(); ++i) {
      auto v = static_cast<uint16_t>(rgb[i] << 8 | 0xff); // not rounded up
      std::memcpy(&wide[2 * i], &v, 2);
    }
    CHECK(decoded(codec, png(w, h, SPNG_COLOR_TYPE_TRUECOLOR, 16, wide), 3)
            .pixels
          == rgb);
  }
}

TEST_CASE("WebP decodes: lossless exactly, lossy close", "[image]") {
  int w = 31, h = 22;
  auto rgb = pattern(w, h, 3);
  image_codec codec;
  CHECK(decoded(codec, webp(w, h, rgb, true), 3).pixels == rgb);
  auto g = decoded(codec, webp(w, h, rgb, true), 1);
  for (size_t i = 0; i < g.pixels.size(); ++i)
    REQUIRE(g.pixels[i] == gray_of(&rgb[i * 3]));
  // Lossy at quality 90: the same size, the pixels near the original
  // (a smooth image: the pattern's sawtooth is lossy coding's worst case).
  std::vector<uint8_t> smooth(rgb.size());
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c)
        smooth[(static_cast<size_t>(y) * w + x) * 3 + c] =
          static_cast<uint8_t>(x * 4 + y * 3 + c * 20);
  auto lossy = decoded(codec, webp(w, h, smooth, false), 3);
  double err = 0;
  for (size_t i = 0; i < smooth.size(); ++i)
    err += std::abs(lossy.pixels[i] - smooth[i]);
  CHECK(err / static_cast<double>(smooth.size()) < 4);
}

TEST_CASE("PNG and WebP are refused with the same errors as JPEG",
          "[image]") {
  int w = 40, h = 30;
  auto rgb = pattern(w, h, 3);
  image_codec codec;
  image out;
  for (auto& file : {png(w, h, SPNG_COLOR_TYPE_TRUECOLOR, 8, rgb),
                     webp(w, h, rgb, true)}) {
    image_info info;
    REQUIRE(codec.header(file, info));
    CHECK(info.width == w);
    CHECK(info.height == h);
    auto box = full_image(info.width, info.height);
    SECTION(std::string{"too many pixels: "}
            + image_format_name(info.format)) {
      CHECK_FALSE(codec.decode(info, file, 3, 1000, 8, 8, box, out));
      CHECK(codec.error() == "image of 40x30 exceeds the limit of 1000 pixels");
    }
    SECTION(std::string{"channels: "} + image_format_name(info.format)) {
      CHECK_FALSE(codec.decode(info, file, 2, 1 << 30, 8, 8, box, out));
      CHECK(codec.error() == "channels must be 1 or 3");
    }
    SECTION(std::string{"cut short: "} + image_format_name(info.format)) {
      // Header intact, data missing: an error naming the format.
      auto cut = file.substr(0, file.size() * 2 / 3);
      image_info ci;
      if (codec.header(cut, ci)) {
        CHECK_FALSE(codec.decode(ci, cut, 3, 1 << 30, 8, 8, box, out));
        CHECK(codec.error().find(std::string{"cannot decode the "}
                                 + image_format_name(info.format)
                                 + " image: ")
              == 0);
      } else {
        CHECK(codec.error().find(std::string{"not a "}
                                 + image_format_name(info.format))
              == 0);
      }
    }
  }
  SECTION("a PNG whose data CRC is wrong") {
    auto file = png(w, h, SPNG_COLOR_TYPE_TRUECOLOR, 8, rgb);
    auto idat = file.find("IDAT");
    REQUIRE(idat != std::string::npos);
    file[idat + 6] = static_cast<char>(file[idat + 6] ^ 0x5a);
    image_info info;
    REQUIRE(codec.header(file, info));
    auto box = full_image(info.width, info.height);
    CHECK_FALSE(codec.decode(info, file, 3, 1 << 30, 8, 8, box, out));
    CHECK(codec.error().find("cannot decode the PNG image: ") == 0);
  }
  SECTION("a header of a PNG that claims 0 columns") {
    auto file = png(w, h, SPNG_COLOR_TYPE_TRUECOLOR, 8, rgb);
    // IHDR's width: bytes 16..19.
    file[16] = file[17] = file[18] = file[19] = 0;
    image_info info;
    CHECK_FALSE(codec.header(file, info));
    CHECK(codec.error().find("not a PNG image: ") == 0);
  }
}
