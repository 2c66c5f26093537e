// numeric: per-feature transforms of numeric fields, as tf.feature_column's
// numeric_column(normalizer_fn=...) and bucketized_column. Declared in
// actors/features/numeric.hpp.
#include "actorflow/actors/features/numeric.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "actorflow/actors/features/feature_fields.hpp"

namespace af {

namespace {

enum class numeric_op { log1p, standardize, bucketize };

constexpr const char* known_ops = "log1p, standardize, bucketize";

bool op_of(const std::string& name, numeric_op& out) {
  if (name == "log1p")
    out = numeric_op::log1p;
  else if (name == "standardize")
    out = numeric_op::standardize;
  else if (name == "bucketize")
    out = numeric_op::bucketize;
  else
    return false;
  return true;
}

struct numeric_feature {
  std::string input;
  std::string output; // default: input
  std::vector<numeric_op> ops;
  double mean = 0;
  double std = 1;
  std::vector<double> boundaries;
  bool buckets() const {
    return !ops.empty() && ops.back() == numeric_op::bucketize;
  }
};

std::vector<numeric_feature> numeric_features_of(const topology::Stage& s) {
  std::vector<numeric_feature> out;
  for (auto& f : s.numeric().feature()) {
    numeric_feature c;
    c.input = f.input();
    c.output = f.output().empty() ? f.input() : f.output();
    for (auto& name : f.op()) {
      numeric_op op = numeric_op::log1p;
      op_of(name, op);
      c.ops.push_back(op);
    }
    c.mean = f.mean();
    if (f.has_std())
      c.std = f.std();
    c.boundaries.assign(f.boundaries().begin(), f.boundaries().end());
    out.push_back(std::move(c));
  }
  return out;
}

std::string number(double x) {
  std::ostringstream s;
  s.precision(17);
  s << x;
  return s.str();
}

// The problem with feature `f` (at: "numeric.feature[I] ('NAME')"), or "".
std::string check_feature(const topology::NumericFeature& f,
                          const std::string& at) {
  bool standardize = false, bucketize = false;
  for (int k = 0; k < f.op_size(); ++k) {
    numeric_op op = numeric_op::log1p;
    if (!op_of(f.op(k), op))
      return at + ": unknown op '" + f.op(k) + "' (known: " + known_ops + ")";
    standardize |= op == numeric_op::standardize;
    if (op == numeric_op::bucketize) {
      if (k + 1 != f.op_size())
        return at
               + ": bucketize must be the last op (it gives bucket "
                 "indices, i64)";
      bucketize = true;
    }
  }
  if (standardize) {
    if (!f.has_std())
      return at + ": standardize needs std (> 0)";
    if (!(f.std() > 0) || !std::isfinite(f.std()))
      return at + ": std must be > 0 and finite, got " + number(f.std());
    if (!std::isfinite(f.mean()))
      return at + ": mean must be finite, got " + number(f.mean());
  } else if (f.has_mean() || f.has_std()) {
    return at
           + ": mean and std are for standardize, which op does not "
             "list";
  }
  if (bucketize) {
    if (f.boundaries().empty())
      return at + ": bucketize needs boundaries (strictly increasing)";
    for (int k = 0; k < f.boundaries_size(); ++k) {
      if (std::isnan(f.boundaries(k)))
        return at + ": boundaries[" + std::to_string(k) + "] is NaN";
      if (k > 0 && !(f.boundaries(k) > f.boundaries(k - 1)))
        return at + ": boundaries must be strictly increasing: boundaries["
               + std::to_string(k) + "] = " + number(f.boundaries(k))
               + " after " + number(f.boundaries(k - 1));
    }
  } else if (!f.boundaries().empty()) {
    return at + ": boundaries are for bucketize, which op does not list";
  }
  return {};
}

std::string check_numeric(const topology::Stage& s) {
  auto& p = s.numeric();
  std::vector<std::string> outputs;
  for (int i = 0; i < p.feature_size(); ++i) {
    auto& f = p.feature(i);
    auto at = "numeric.feature[" + std::to_string(i) + "]";
    if (auto problem = check_feature(f, at + " ('" + f.input() + "')");
        !problem.empty())
      return problem;
    outputs.push_back(f.output().empty() ? f.input() : f.output());
  }
  return duplicate_feature_output(outputs, "numeric");
}

template <class T>
void widen(const tensor& t, std::vector<double>& out) {
  auto* p = t.data_as<T>();
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<double>(p[i]);
}

// The values of `t` as doubles; false for a dtype that is not numeric.
bool values_of(const tensor& t, std::vector<double>& out) {
  out.resize(static_cast<size_t>(t.elements()));
  switch (t.type()) {
    case dtype::f32:
      widen<float>(t, out);
      return true;
    case dtype::f64:
      widen<double>(t, out);
      return true;
    case dtype::i64:
      widen<int64_t>(t, out);
      return true;
    case dtype::i32:
      widen<int32_t>(t, out);
      return true;
    case dtype::u8:
      widen<uint8_t>(t, out);
      return true;
    default:
      return false;
  }
}

class numeric : public stage_logic {
public:
  explicit numeric(std::vector<numeric_feature> features)
    : features_(std::move(features)) {}

  void process(batch&& item, emitter& out) override {
    // Every feature reads the item as it came in: compute all, then set.
    std::vector<tensor> results;
    results.reserve(features_.size());
    for (auto& f : features_)
      results.push_back(apply(item, f));
    for (size_t k = 0; k < features_.size(); ++k)
      item.set(features_[k].output, std::move(results[k]));
    out.push(std::move(item));
  }

private:
  tensor apply(const batch& item, const numeric_feature& f) {
    auto& in = feature_field(item, f.input, "numeric");
    if (!values_of(in, values_))
      throw input_error("numeric: field '" + f.input + "' is " + to_string(in)
                        + ", not numeric (f32, f64, i64, i32 or u8)");
    for (auto op : f.ops) {
      if (op == numeric_op::log1p) {
        for (size_t i = 0; i < values_.size(); ++i) {
          if (values_[i] <= -1)
            throw input_error("numeric: field '" + f.input + "' at "
                              + feature_record(item, record_of(in, i))
                              + ": log1p of " + number(values_[i])
                              + " (values must be > -1)");
          values_[i] = std::log1p(values_[i]);
        }
      } else if (op == numeric_op::standardize) {
        for (auto& v : values_)
          v = (v - f.mean) / f.std;
      }
    }
    if (f.buckets()) {
      auto t = tensor::allocate(dtype::i64, in.shape());
      auto* dst = t.mutable_data_as<int64_t>();
      auto& b = f.boundaries;
      for (size_t i = 0; i < values_.size(); ++i)
        dst[i] = std::upper_bound(b.begin(), b.end(), values_[i]) - b.begin();
      return t;
    }
    auto t = tensor::allocate(dtype::f32, in.shape());
    auto* dst = t.mutable_data_as<float>();
    for (size_t i = 0; i < values_.size(); ++i)
      dst[i] = static_cast<float>(values_[i]);
    return t;
  }

  // The record that holds flattened element `i` of `t`.
  static int64_t record_of(const tensor& t, size_t i) {
    auto per_record = t.rows() > 0 ? t.elements() / t.rows() : 1;
    return static_cast<int64_t>(i) / std::max<int64_t>(per_record, 1);
  }

  std::vector<numeric_feature> features_;
  std::vector<double> values_; // the feature being computed
};

} // namespace

stage_type numeric_type() {
  stage_type t;
  t.name = "numeric";
  t.kind = stage_kind::transform;
  t.one_to_one = true;
  t.description = "transforms numeric fields: log1p, standardize, bucketize";
  t.config_block = "numeric";
  t.config_required = {"feature.input", "feature.op"};
  t.check = check_numeric;
  t.make = [](const stage_info&, const topology::Stage& s) {
    if (auto problem = check_numeric(s); !problem.empty())
      throw std::invalid_argument(problem);
    return std::make_shared<numeric>(numeric_features_of(s));
  };
  return t;
}

} // namespace af
