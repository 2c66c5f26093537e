// A histogram of many values (a model variable's weights or gradients),
// summarized where the values are, so that only ~60 numbers travel to the
// TensorBoard writer (runtime/formats/event_writer.hpp, docs/monitoring.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

namespace af {

/// What TensorBoard's HistogramProto holds: bucket i counts the values in
/// (limits[i-1], limits[i]] (the first from min); non-finite values are
/// left out and counted in `nonfinite`.
struct histogram_summary {
  std::string tag; // "weights/0_dense/kernel"
  int64_t step = 0;
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> limits, counts;
  uint64_t nonfinite = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, histogram_summary& x) {
  return f(caf::meta::type_name("af::histogram_summary"), x.tag, x.step,
           x.min, x.max, x.num, x.sum, x.sum_squares, x.limits, x.counts,
           x.nonfinite);
}

/// `n` values in `buckets` equal buckets from the smallest to the largest
/// finite value (all equal: one bucket). Values are multiplied by `scale`
/// first (a gradient sum over a batch becomes the mean). No values: num 0
/// and no buckets. `v` is read during the call only (it may be null when
/// n == 0); `buckets` < 1 counts as 1. Does not throw (std::bad_alloc
/// aside).
histogram_summary summarize(std::string tag, int64_t step, const float* v,
                            size_t n, double scale = 1.0, int buckets = 30);

} // namespace af
