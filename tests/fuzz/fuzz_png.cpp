// libFuzzer target: PNG decoding (libspng through image_codec) on arbitrary
// bytes: header, decode in gray and colour under a pixel limit, resample.
//
// AF_FUZZ_WRITE_SEEDS=DIR: writes small PNGs of every colour type (gray,
// RGB, palette, gray + alpha, RGBA; 8 and 16 bits; one interlaced), made
// with libspng's encoder, to DIR and exits (tests/fuzz/corpus/README.md).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <spng.h>

#include "tests/fuzz/fuzz_util.hpp"
#include "tests/fuzz/image_fuzz.hpp"

namespace {

std::string encode(uint32_t w, uint32_t h, uint8_t color_type, uint8_t depth,
                   bool interlaced) {
  int samples = color_type == SPNG_COLOR_TYPE_TRUECOLOR         ? 3
                : color_type == SPNG_COLOR_TYPE_TRUECOLOR_ALPHA ? 4
                : color_type == SPNG_COLOR_TYPE_GRAYSCALE_ALPHA ? 2
                                                                : 1;
  std::vector<uint8_t> px(w * h * samples * (depth / 8));
  for (size_t i = 0; i < px.size(); ++i)
    px[i] = static_cast<uint8_t>(i * 29 % 256);
  if (color_type == SPNG_COLOR_TYPE_INDEXED)
    for (auto& p : px)
      p %= 4;
  spng_ctx* ctx = spng_ctx_new(SPNG_CTX_ENCODER);
  spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
  spng_ihdr ihdr{};
  ihdr.width = w;
  ihdr.height = h;
  ihdr.color_type = color_type;
  ihdr.bit_depth = depth;
  ihdr.interlace_method = interlaced ? SPNG_INTERLACE_ADAM7
                                     : SPNG_INTERLACE_NONE;
  spng_plte plte{};
  plte.n_entries = 4;
  for (uint32_t i = 0; i < 4; ++i)
    plte.entries[i] = spng_plte_entry{static_cast<uint8_t>(i * 60), 10,
                                      static_cast<uint8_t>(200 - i * 50), 0};
  size_t len = 0;
  int err = spng_set_ihdr(ctx, &ihdr);
  if (err == 0 && color_type == SPNG_COLOR_TYPE_INDEXED)
    err = spng_set_plte(ctx, &plte);
  if (err == 0)
    err = spng_encode_image(ctx, px.data(), px.size(), SPNG_FMT_PNG,
                            SPNG_ENCODE_FINALIZE);
  auto* buf = err == 0 ? static_cast<char*>(spng_get_png_buffer(ctx, &len, &err))
                       : nullptr;
  if (err != 0 || buf == nullptr)
    std::abort(); // a broken seed writer must not pass
  std::string out{buf, len};
  std::free(buf);
  spng_ctx_free(ctx);
  return out;
}

void write_seeds(const std::string& dir) {
  using af::fuzz::write_file;
  write_file(dir + "/gray_9x7.png",
             encode(9, 7, SPNG_COLOR_TYPE_GRAYSCALE, 8, false));
  write_file(dir + "/rgb_12x5.png",
             encode(12, 5, SPNG_COLOR_TYPE_TRUECOLOR, 8, false));
  write_file(dir + "/rgb_16bit_4x3.png",
             encode(4, 3, SPNG_COLOR_TYPE_TRUECOLOR, 16, false));
  write_file(dir + "/rgba_interlaced_10x10.png",
             encode(10, 10, SPNG_COLOR_TYPE_TRUECOLOR_ALPHA, 8, true));
  write_file(dir + "/gray_alpha_6x6.png",
             encode(6, 6, SPNG_COLOR_TYPE_GRAYSCALE_ALPHA, 8, false));
  write_file(dir + "/palette_8x4.png",
             encode(8, 4, SPNG_COLOR_TYPE_INDEXED, 8, false));
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  return af::fuzz::write_seeds_or_fuzz(write_seeds);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  af::fuzz::decode_image({reinterpret_cast<const char*>(data), size},
                         af::image_format::png);
  return 0;
}
