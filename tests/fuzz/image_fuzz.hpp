// What the PNG and WebP fuzz targets do with each input: the format's
// header, then image_codec::decode at a small output size in gray and in
// colour (a bounded pixel limit), checking what it returns, and the crop,
// resize and normalize path on whatever decoded.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "actorflow/runtime/image/image_codec.hpp"
#include "actorflow/runtime/image/image_ops.hpp"

namespace af::fuzz {

inline void decode_image(std::string_view bytes, image_format want) {
  static image_codec codec;
  image_info info;
  if (sniff_image(bytes) != want || !codec.header(bytes, info))
    return;
  if (info.format != want)
    __builtin_trap();
  for (int channels : {1, 3}) {
    record_rng rng{bytes.size(), static_cast<uint64_t>(channels), 0};
    auto box = info.width > 0 && info.height > 0
                 ? random_resized_crop(info.width, info.height, rng)
                 : crop_box{};
    image img;
    if (!codec.decode(info, bytes, channels, 4000000, 11, 9, box, img))
      continue;
    if (img.width != info.width || img.height != info.height
        || img.channels != channels
        || img.pixels.size()
             != static_cast<size_t>(img.width) * img.height * channels)
      __builtin_trap();
    std::vector<float> out(9 * 11 * static_cast<size_t>(channels));
    float mean[3] = {0.5f, 0.5f, 0.5f}, stddev[3] = {0.2f, 0.2f, 0.2f};
    resample_f32(img, box, 11, 9, channels == 3, mean, stddev, out.data());
  }
}

} // namespace af::fuzz
