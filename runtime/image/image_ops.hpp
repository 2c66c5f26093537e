// Geometric and value transforms for decoded images, fused so that each
// output pixel is computed once: crop -> bilinear resize -> optional
// horizontal flip -> optional normalization, written straight into the
// output tensor's row.
#pragma once

#include <cstdint>
#include <vector>

#include "actorflow/runtime/core/random.hpp"
#include "actorflow/runtime/image/jpeg.hpp"

namespace af {


/// torchvision's RandomResizedCrop: a random area fraction in
/// [scale_lo, scale_hi] and aspect ratio in [ratio_lo, ratio_hi] (log-uniform),
/// 10 tries, then a centered crop clamped to the ratio range.
crop_box random_resized_crop(int width, int height, record_rng& rng,
                             double scale_lo = 0.08, double scale_hi = 1.0,
                             double ratio_lo = 3.0 / 4.0,
                             double ratio_hi = 4.0 / 3.0);

/// A centered crop with the output's aspect ratio covering `fraction` of
/// the largest such crop.
crop_box center_crop(int width, int height, int out_width, int out_height,
                     double fraction);

/// The whole image.
crop_box full_image(int width, int height);

/// Where the output pixels of one axis sample the source: output pixel i
/// blends source pixels lo[i] and hi[i] with weight frac[i] on hi. Both
/// resample functions use it; the GPU path (image_decode on "cuda") takes
/// the maps computed here so that its arithmetic is the same.
struct axis_map {
  std::vector<int> lo, hi;
  std::vector<float> frac;
};

/// The map of a window [start, start + length) of an axis of `limit`
/// source pixels onto `out` output pixels (mirrored if `flip`).
axis_map map_axis(double start, double length, int out, int limit,
                  bool flip);

/// Bilinear resample of `box` of `src` to out_width x out_height (pixel
/// centers at +0.5, as TF's half_pixel_centers and PIL; samples inside
/// `box` only, as cropping and then resizing), mirrored if `flip`. `box`
/// is in pixels of the whole image; `src` may be a window of it
/// (image::left, top), which must hold every pixel the box samples.
/// Writes u8 pixels, rounded half up.
void resample_u8(const image& src, const crop_box& box, int out_width,
                 int out_height, bool flip, uint8_t* dst);

/// Colour jitter factors for one image (1: no change).
struct color_factors {
  float brightness = 1, contrast = 1, saturation = 1;
};

/// Draws each factor uniformly from [max(0, 1 - x), 1 + x] for the jitter
/// amounts `brightness`, `contrast`, `saturation` (0: factor 1, no draw).
color_factors draw_color_factors(record_rng& rng, double brightness,
                                 double contrast, double saturation);

/// torchvision's ColorJitter with fixed factors, in place on `pixels`
/// pixels of `channels` values in [0, 1]: brightness (v * b), then
/// contrast (blend with the mean of the image's gray values), then
/// saturation (blend with each pixel's gray value; 3 channels only), each
/// result clamped to [0, 1]. Gray is 0.299 R + 0.587 G + 0.114 B.
void color_jitter(float* values, size_t pixels, int channels,
                  const color_factors& f);

/// As resample_u8, writing float32 (v / 255 - mean[c]) / stddev[c].
void resample_f32(const image& src, const crop_box& box, int out_width,
                  int out_height, bool flip, const float* mean,
                  const float* stddev, float* dst);

} // namespace af
