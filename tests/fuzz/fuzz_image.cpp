// libFuzzer target: the JPEG decoder wrapper on arbitrary bytes, with a
// pixel limit, at several target sizes (exercising DCT scaling), then the
// crop/resize/normalize path on whatever decoded; and the window decoder
// (libjpeg's crop and skip) on a random crop of the header's size.
#include <cstdint>
#include <string_view>
#include <vector>

#include "actorflow/runtime/image/image_ops.hpp"
#include "actorflow/runtime/image/jpeg.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes{reinterpret_cast<const char*>(data), size};
  static af::jpeg_codec codec;
  af::image img;
  for (int channels : {1, 3}) {
    if (!codec.decode(bytes, channels, 4000000, img, 7, 5, channels == 3))
      continue;
    if (img.width <= 0 || img.height <= 0
        || img.pixels.size()
             != static_cast<size_t>(img.width) * img.height * channels)
      __builtin_trap();
    af::record_rng rng{size, 0, 0};
    auto box = af::random_resized_crop(img.width, img.height, rng);
    std::vector<float> out(9 * 11 * static_cast<size_t>(channels));
    float mean[3] = {0.5f, 0.5f, 0.5f}, stddev[3] = {0.2f, 0.2f, 0.2f};
    af::resample_f32(img, box, 11, 9, true, mean, stddev, out.data());
  }
  af::jpeg_info info;
  if (codec.header(bytes, info)) {
    for (int channels : {1, 3}) {
      af::record_rng rng{size, 1, 0};
      auto box = af::random_resized_crop(info.width, info.height, rng);
      if (!codec.decode_window(bytes, channels, 4000000, 11, 9, box, img,
                               channels == 3))
        continue;
      if (img.pixels.size()
          != static_cast<size_t>(img.width) * img.height * channels)
        __builtin_trap();
      std::vector<uint8_t> out(9 * 11 * static_cast<size_t>(channels));
      af::resample_u8(img, box, 11, 9, false, out.data());
    }
  }
  return 0;
}
