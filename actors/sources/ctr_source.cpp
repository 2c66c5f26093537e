// ctr_source: synthetic click logs from a planted logistic model, so that a
// CTR model's AUC can be compared with the best achievable one. Declared in
// actors/sources/ctr_source.hpp.
#include "actorflow/actors/sources/ctr_source.hpp"

#include <cmath>

#include "actorflow/actors/sources/strided_source.hpp"
#include "actorflow/runtime/core/random.hpp"

namespace af {

namespace {

struct ctr_config {
  int64_t records = 100000; // per epoch
  int64_t features = 8; // categorical features (ids) per record
  int64_t vocabulary = 1000; // ids per feature
  double weight_scale = 1.0; // standard deviation of the planted weights
  double bias = -1.0; // added to every logit
  int64_t model_seed = 1; // of the planted weights
  int64_t split_seed = 0; // another value: another split of the same model
  int64_t epochs = 1;
  int64_t records_per_item = 256;
  double zipf = 1.1; // skew of the id frequencies; 0: uniform
};

ctr_config ctr_source_config_of(const topology::Stage& s) {
  ctr_config c;
  auto& p = s.ctr_source();
  if (p.has_records())
    c.records = p.records();
  if (p.has_features())
    c.features = p.features();
  if (p.has_vocabulary())
    c.vocabulary = p.vocabulary();
  if (p.has_weight_scale())
    c.weight_scale = p.weight_scale();
  if (p.has_bias())
    c.bias = p.bias();
  if (p.has_model_seed())
    c.model_seed = p.model_seed();
  if (p.has_split_seed())
    c.split_seed = p.split_seed();
  if (p.has_epochs())
    c.epochs = p.epochs();
  if (p.has_records_per_item())
    c.records_per_item = p.records_per_item();
  if (p.has_zipf())
    c.zipf = p.zipf();
  return c;
}

// Standard normal from two uniforms (Box-Muller).
double normal(record_rng& rng) {
  double u1 = 1.0 - rng.uniform(); // (0, 1]
  double u2 = rng.uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

class ctr_source : public strided_source {
public:
  ctr_source(const stage_info& info, ctr_config cfg)
    : strided_source(info, cfg.records, cfg.records_per_item, cfg.epochs),
      cfg_(cfg) {
    auto n = static_cast<size_t>(cfg_.features * cfg_.vocabulary);
    weights_.resize(n);
    for (size_t id = 0; id < n; ++id) {
      record_rng rng{static_cast<uint64_t>(cfg_.model_seed), 0x77656967ULL,
                     id};
      weights_[id] = static_cast<float>(cfg_.weight_scale * normal(rng));
    }
  }

private:
  void fill(int64_t first, int64_t stride, int64_t n, batch& b) override {
    auto f = cfg_.features;
    auto ids = tensor::allocate(dtype::i64, {n, f});
    auto label = tensor::allocate(dtype::i64, {n});
    auto logit = tensor::allocate(dtype::f32, {n});
    auto index = tensor::allocate(dtype::i64, {n});
    auto* ip = ids.mutable_data_as<int64_t>();
    auto* lp = label.mutable_data_as<int64_t>();
    auto* zp = logit.mutable_data_as<float>();
    auto* xp = index.mutable_data_as<int64_t>();
    auto exponent = 1.0 + cfg_.zipf;
    for (int64_t i = 0; i < n; ++i) {
      auto k = first + i * stride;
      record_rng rng{info().seed
                       ^ mix64(static_cast<uint64_t>(cfg_.split_seed)),
                     0x636c6b73ULL, static_cast<uint64_t>(k)};
      double z = cfg_.bias;
      for (int64_t j = 0; j < f; ++j) {
        auto v = static_cast<int64_t>(static_cast<double>(cfg_.vocabulary)
                                      * std::pow(rng.uniform(), exponent));
        auto id = j * cfg_.vocabulary + std::min(v, cfg_.vocabulary - 1);
        ip[i * f + j] = id;
        z += weights_[static_cast<size_t>(id)];
      }
      zp[i] = static_cast<float>(z);
      lp[i] = rng.uniform() < 1.0 / (1.0 + std::exp(-z)) ? 1 : 0;
      xp[i] = k;
    }
    b.set("ids", std::move(ids));
    b.set("label", std::move(label));
    b.set("logit", std::move(logit));
    b.set("index", std::move(index));
  }

  ctr_config cfg_;
  std::vector<float> weights_;
};

std::string check_ctr_source(const topology::Stage& s) {
  if (s.config_case() != topology::Stage::kCtrSource
      && s.config_case() != topology::Stage::CONFIG_NOT_SET)
    return "expects a ctr_source { ... } block";
  auto c = ctr_source_config_of(s);
  if (c.records < 0)
    return "records must be >= 0";
  if (c.features < 1 || c.vocabulary < 1)
    return "features and vocabulary must be >= 1";
  if (c.features * c.vocabulary > (int64_t{1} << 28))
    return "features x vocabulary must be <= 2^28";
  if (c.records_per_item < 1)
    return "records_per_item must be >= 1";
  if (c.epochs < 1)
    return "epochs must be >= 1";
  if (!(c.weight_scale >= 0) || !(c.zipf >= 0))
    return "weight_scale and zipf must be >= 0";
  return {};
}

} // namespace

stage_type ctr_source_type() {
  stage_type t;
  t.name = "ctr_source";
  t.kind = stage_kind::source;
  t.reassignable = true;
  t.description = "synthetic click logs from a planted logistic model "
                  "(ids, label, logit)";
  t.check = check_ctr_source;
  t.make = [](const stage_info& info, const topology::Stage& s) {
    return std::make_shared<ctr_source>(info, ctr_source_config_of(s));
  };
  return t;
}

} // namespace af
