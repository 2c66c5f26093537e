// image_decode: decodes images (a bytes field: JPEG with libjpeg-turbo, PNG
// with libspng, WebP with libwebp, by content; runtime/image/image_codec.hpp) and
// transforms them to a fixed size: resize, center crop or random resized
// crop, optional random horizontal flip, then float32 normalized by
// mean/std (or u8). The decoder scales down in the DCT when the target needs
// at most half the image. Randomness comes from (job seed, epoch, record
// "index"), so results do not depend on replicas or order. Images above
// max_pixels are refused before any allocation; undecodable ones fail the
// stage naming the record, or are skipped and counted. Output: [n, height,
// width, channels]. Config: topology.ImageDecodeConfig.
//
// device "cuda" decodes each batch with nvJPEG (gpu/jpeg_decoder.hpp) into
// GPU memory, which a trainer on the same GPU reads in place; anything else
// that reads the output copies it to the host once. Crop boxes, flips and
// sampling maps are computed here as for the CPU; an image the GPU cannot
// decode is decoded on the CPU, so it gets the CPU's result or error.
#pragma once

#include "actorflow/runtime/stage/registry.hpp"

namespace af {

stage_type image_decode_type();

} // namespace af
