#include "runtime/image_ops.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace af {

crop_box full_image(int width, int height) {
  return crop_box{0, 0, static_cast<double>(width),
                  static_cast<double>(height)};
}

crop_box random_resized_crop(int width, int height, record_rng& rng,
                             double scale_lo, double scale_hi,
                             double ratio_lo, double ratio_hi) {
  double area = static_cast<double>(width) * height;
  double log_lo = std::log(ratio_lo), log_hi = std::log(ratio_hi);
  for (int attempt = 0; attempt < 10; ++attempt) {
    double target = area * rng.uniform(scale_lo, scale_hi);
    double aspect = std::exp(rng.uniform(log_lo, log_hi));
    auto w = std::round(std::sqrt(target * aspect));
    auto h = std::round(std::sqrt(target / aspect));
    if (w > 0 && h > 0 && w <= width && h <= height) {
      auto x = static_cast<double>(
        rng.below(static_cast<uint64_t>(width - w) + 1));
      auto y = static_cast<double>(
        rng.below(static_cast<uint64_t>(height - h) + 1));
      return crop_box{x, y, w, h};
    }
  }
  double in_ratio = static_cast<double>(width) / height;
  double w = width, h = height;
  if (in_ratio < ratio_lo)
    h = std::round(w / ratio_lo);
  else if (in_ratio > ratio_hi)
    w = std::round(h * ratio_hi);
  return crop_box{(width - w) / 2, (height - h) / 2, w, h};
}

crop_box center_crop(int width, int height, int out_width, int out_height,
                     double fraction) {
  double target_ratio = static_cast<double>(out_width) / out_height;
  double w = width, h = height;
  if (w / h > target_ratio)
    w = h * target_ratio;
  else
    h = w / target_ratio;
  w *= fraction;
  h *= fraction;
  return crop_box{(width - w) / 2, (height - h) / 2, w, h};
}

axis_map map_axis(double start, double length, int out, int limit,
                  bool flip) {
  axis_map m;
  m.lo.resize(out);
  m.hi.resize(out);
  m.frac.resize(out);
  double scale = length / out;
  // Sample inside the window only, as cropping first and then resizing
  // does (tf.image, PIL, torchvision): between the centres of its first and
  // last pixels. Clamping to the whole image instead blends pixels from
  // outside the window into the border rows and columns when the window is
  // enlarged (found by tests/interop/image_ops.py).
  double first = std::clamp(start, 0.0, static_cast<double>(limit - 1));
  double last = std::clamp(start + length - 1, first,
                           static_cast<double>(limit - 1));
  for (int i = 0; i < out; ++i) {
    int o = flip ? out - 1 - i : i;
    double s = start + (o + 0.5) * scale - 0.5;
    s = std::clamp(s, first, last);
    int lo = static_cast<int>(s);
    m.lo[i] = lo;
    m.hi[i] = std::min(lo + 1, limit - 1);
    m.frac[i] = static_cast<float>(s - lo);
  }
  return m;
}

namespace {

template <class Out, class Store>
void resample(const image& src, const crop_box& box, int out_w, int out_h,
              bool flip, Out* dst, Store store) {
  auto xs = map_axis(box.x, box.width, out_w, src.width, flip);
  auto ys = map_axis(box.y, box.height, out_h, src.height, false);
  int c = src.channels;
  size_t stride = static_cast<size_t>(src.width) * c;
  for (int y = 0; y < out_h; ++y) {
    auto* r0 = src.pixels.data() + ys.lo[y] * stride;
    auto* r1 = src.pixels.data() + ys.hi[y] * stride;
    float fy = ys.frac[y];
    Out* row = dst + static_cast<size_t>(y) * out_w * c;
    for (int x = 0; x < out_w; ++x) {
      int x0 = xs.lo[x] * c, x1 = xs.hi[x] * c;
      float fx = xs.frac[x];
      for (int k = 0; k < c; ++k) {
        float top = r0[x0 + k] + (r0[x1 + k] - r0[x0 + k]) * fx;
        float bottom = r1[x0 + k] + (r1[x1 + k] - r1[x0 + k]) * fx;
        row[x * c + k] = store(top + (bottom - top) * fy, k);
      }
    }
  }
}

} // namespace

void resample_u8(const image& src, const crop_box& box, int out_width,
                 int out_height, bool flip, uint8_t* dst) {
  resample(src, box, out_width, out_height, flip, dst, [](float v, int) {
    return static_cast<uint8_t>(std::clamp(v + 0.5f, 0.0f, 255.0f));
  });
}

void resample_f32(const image& src, const crop_box& box, int out_width,
                  int out_height, bool flip, const float* mean,
                  const float* stddev, float* dst) {
  float scale[3], shift[3];
  for (int k = 0; k < src.channels; ++k) {
    scale[k] = 1.0f / (255.0f * stddev[k]);
    shift[k] = -mean[k] / stddev[k];
  }
  resample(src, box, out_width, out_height, flip, dst,
           [&](float v, int k) { return v * scale[k] + shift[k]; });
}

} // namespace af
