// A histogram of many values (a model variable's weights or gradients),
// summarized where the values are, so that only ~60 numbers travel to the
// TensorBoard writer. Declared in runtime/core/histogram.hpp.
#include "actorflow/runtime/core/histogram.hpp"

#include <algorithm>
#include <cmath>

namespace af {

histogram_summary summarize(std::string tag, int64_t step, const float* v,
                            size_t n, double scale, int buckets) {
  histogram_summary h;
  h.tag = std::move(tag);
  h.step = step;
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    double x = static_cast<double>(v[i]) * scale;
    if (!std::isfinite(x)) {
      ++h.nonfinite;
      continue;
    }
    h.min = any ? std::min(h.min, x) : x;
    h.max = any ? std::max(h.max, x) : x;
    any = true;
    h.num += 1;
    h.sum += x;
    h.sum_squares += x * x;
  }
  if (!any)
    return h;
  if (h.max == h.min)
    buckets = 1;
  auto k = static_cast<size_t>(std::max(buckets, 1));
  double width = (h.max - h.min) / static_cast<double>(k);
  h.counts.assign(k, 0.0);
  h.limits.resize(k);
  for (size_t b = 0; b < k; ++b)
    h.limits[b] = b + 1 == k ? h.max : h.min + width * static_cast<double>(b + 1);
  for (size_t i = 0; i < n; ++i) {
    double x = static_cast<double>(v[i]) * scale;
    if (!std::isfinite(x))
      continue;
    // The bucket whose upper limit is the first >= x.
    auto b = static_cast<size_t>(
      std::lower_bound(h.limits.begin(), h.limits.end(), x) - h.limits.begin());
    h.counts[std::min(b, k - 1)] += 1;
  }
  return h;
}

} // namespace af
