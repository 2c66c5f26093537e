// libFuzzer target: WebP decoding (libwebp through image_codec) on
// arbitrary bytes: header, decode in gray and colour under a pixel limit,
// resample.
//
// AF_FUZZ_WRITE_SEEDS=DIR: writes small WebPs (lossy and lossless, with and
// without alpha), made with libwebp's encoder, to DIR and exits
// (tests/fuzz/corpus/README.md).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <webp/encode.h>

#include "tests/fuzz/fuzz_util.hpp"
#include "tests/fuzz/image_fuzz.hpp"

namespace {

std::string encode(int w, int h, bool alpha, bool lossless) {
  int samples = alpha ? 4 : 3;
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * samples);
  for (size_t i = 0; i < px.size(); ++i)
    px[i] = static_cast<uint8_t>(i * 13 % 256);
  uint8_t* out = nullptr;
  size_t n =
    alpha ? (lossless ? WebPEncodeLosslessRGBA(px.data(), w, h, w * 4, &out)
                      : WebPEncodeRGBA(px.data(), w, h, w * 4, 80, &out))
          : (lossless ? WebPEncodeLosslessRGB(px.data(), w, h, w * 3, &out)
                      : WebPEncodeRGB(px.data(), w, h, w * 3, 80, &out));
  if (n == 0)
    std::abort(); // a broken seed writer must not pass
  std::string s{reinterpret_cast<char*>(out), n};
  WebPFree(out);
  return s;
}

void write_seeds(const std::string& dir) {
  using af::fuzz::write_file;
  write_file(dir + "/lossy_16x12.webp", encode(16, 12, false, false));
  write_file(dir + "/lossless_9x7.webp", encode(9, 7, false, true));
  write_file(dir + "/lossy_alpha_8x8.webp", encode(8, 8, true, false));
  write_file(dir + "/lossless_alpha_5x3.webp", encode(5, 3, true, true));
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  return af::fuzz::write_seeds_or_fuzz(write_seeds);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  af::fuzz::decode_image({reinterpret_cast<const char*>(data), size},
                         af::image_format::webp);
  return 0;
}
