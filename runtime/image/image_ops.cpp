// Geometric and value transforms for decoded images, fused so that each
// output pixel is computed once: crop -> bilinear resize -> optional
// horizontal flip -> optional normalization. Declared in
// runtime/image/image_ops.hpp.
#include "actorflow/runtime/image/image_ops.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>
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

// The source rows a blend reads, as float: converting each once (the
// compiler vectorizes it) is cheaper than converting four bytes for every
// output value. float(a) - float(b) is exactly float(a - b) for bytes, so
// the results are those of blending the bytes directly.
class float_rows {
public:
  float_rows(const image& src, int first, int end)
    : src_(src), first_(first), width_(end - first) {
    for (auto& r : rows_)
      r.values.resize(static_cast<size_t>(width_) * src.channels);
  }
  // Source rows y0 and y1 (columns [first, end) of the constructor) as
  // floats, kept from the last call where they were there.
  std::pair<const float*, const float*> pair(int y0, int y1) {
    int s0 = slot_of(y0);
    if (s0 < 0)
      s0 = load(y0, slot_of(y1) == 0 ? 1 : 0);
    int s1 = y1 == y0 ? s0 : slot_of(y1);
    if (s1 < 0)
      s1 = load(y1, 1 - s0);
    return {rows_[s0].values.data(), rows_[s1].values.data()};
  }

private:
  struct cached {
    int y = -1;
    std::vector<float> values;
  };
  int slot_of(int y) const {
    return rows_[0].y == y ? 0 : (rows_[1].y == y ? 1 : -1);
  }
  int load(int y, int slot) {
    auto& r = rows_[slot];
    r.y = y;
    const uint8_t* in = src_.pixels.data()
                        + (static_cast<size_t>(y) * src_.width + first_)
                            * static_cast<size_t>(src_.channels);
    float* out = r.values.data();
    for (size_t i = 0, n = r.values.size(); i < n; ++i)
      out[i] = in[i];
    return slot;
  }

  const image& src_;
  int first_, width_;
  cached rows_[2];
};

// The bilinear blend of every output value, with C channels known at
// compile time (the arithmetic, and so every result, is the same for any C;
// a constant C lets the compiler unroll and keep the store's constants in
// registers).
template <int C, class Out, class Store>
void blend(const image& src, const axis_map& xs, const axis_map& ys,
           Out* __restrict dst, Store store) {
  auto out_w = static_cast<int>(xs.lo.size());
  auto out_h = static_cast<int>(ys.lo.size());
  // The columns read, and the offsets into a row of them.
  int first = *std::min_element(xs.lo.begin(), xs.lo.end());
  int end = *std::max_element(xs.hi.begin(), xs.hi.end()) + 1;
  std::vector<int> lo(xs.lo.size()), hi(xs.hi.size());
  for (size_t i = 0; i < lo.size(); ++i) {
    lo[i] = (xs.lo[i] - first) * C;
    hi[i] = (xs.hi[i] - first) * C;
  }
  float_rows rows{src, first, end};
  for (int y = 0; y < out_h; ++y) {
    auto [r0, r1] = rows.pair(ys.lo[y], ys.hi[y]);
    float fy = ys.frac[y];
    Out* row = dst + static_cast<size_t>(y) * out_w * C;
    for (int x = 0; x < out_w; ++x) {
      const float* a0 = r0 + lo[x];
      const float* a1 = r0 + hi[x];
      const float* b0 = r1 + lo[x];
      const float* b1 = r1 + hi[x];
      float fx = xs.frac[x];
      for (int k = 0; k < C; ++k) {
        float top = a0[k] + (a1[k] - a0[k]) * fx;
        float bottom = b0[k] + (b1[k] - b0[k]) * fx;
        row[x * C + k] = store(top + (bottom - top) * fy, k);
      }
    }
  }
}

template <class Out, class Store>
void resample(const image& src, const crop_box& box, int out_w, int out_h,
              bool flip, Out* dst, Store store) {
  if (out_w <= 0 || out_h <= 0)
    return;
  auto xs = map_axis(box.x, box.width, out_w,
                     src.full_width > 0 ? src.full_width : src.width, flip);
  auto ys = map_axis(box.y, box.height, out_h,
                     src.full_height > 0 ? src.full_height : src.height,
                     false);
  // Into the window's own coordinates; every sample must lie inside it.
  auto shift = [](axis_map& m, int origin, int size) {
    for (size_t i = 0; i < m.lo.size(); ++i) {
      m.lo[i] -= origin;
      m.hi[i] -= origin;
      if (m.lo[i] < 0 || m.hi[i] >= size)
        throw std::logic_error("resample: the box samples outside the "
                               "decoded window");
    }
  };
  shift(xs, src.left, src.width);
  shift(ys, src.top, src.height);
  if (src.channels == 3)
    blend<3>(src, xs, ys, dst, store);
  else if (src.channels == 1)
    blend<1>(src, xs, ys, dst, store);
  else
    throw std::logic_error("resample: images have 1 or 3 channels, not "
                           + std::to_string(src.channels));
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
  // Copied into the lambda, so that writes to dst cannot change them.
  std::array<float, 3> scale{}, shift{};
  for (int k = 0; k < src.channels; ++k) {
    scale[k] = 1.0f / (255.0f * stddev[k]);
    shift[k] = -mean[k] / stddev[k];
  }
  resample(src, box, out_width, out_height, flip, dst,
           [scale, shift](float v, int k) { return v * scale[k] + shift[k]; });
}

color_factors draw_color_factors(record_rng& rng, double brightness,
                                 double contrast, double saturation) {
  auto draw = [&](double x) {
    return x > 0 ? static_cast<float>(rng.uniform(std::max(0.0, 1 - x), 1 + x))
                 : 1.0f;
  };
  color_factors f;
  f.brightness = draw(brightness);
  f.contrast = draw(contrast);
  f.saturation = draw(saturation);
  return f;
}

void color_jitter(float* v, size_t pixels, int channels,
                  const color_factors& f) {
  auto n = pixels * static_cast<size_t>(channels);
  auto clamp = [](float x) { return std::min(1.0f, std::max(0.0f, x)); };
  auto gray = [&](const float* p) {
    return channels == 3 ? 0.299f * p[0] + 0.587f * p[1] + 0.114f * p[2]
                         : p[0];
  };
  if (f.brightness != 1)
    for (size_t i = 0; i < n; ++i)
      v[i] = clamp(v[i] * f.brightness);
  if (f.contrast != 1 && pixels > 0) {
    double sum = 0;
    for (size_t i = 0; i < pixels; ++i)
      sum += gray(v + i * static_cast<size_t>(channels));
    auto mean = static_cast<float>(sum / static_cast<double>(pixels));
    for (size_t i = 0; i < n; ++i)
      v[i] = clamp(mean + f.contrast * (v[i] - mean));
  }
  if (f.saturation != 1 && channels == 3)
    for (size_t i = 0; i < pixels; ++i) {
      auto* p = v + i * 3;
      auto g = gray(p);
      for (int c = 0; c < 3; ++c)
        p[c] = clamp(g + f.saturation * (p[c] - g));
    }
}

} // namespace af
