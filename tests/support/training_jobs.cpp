// The training stages' test jobs (tests/support/training_jobs.hpp).
#include "tests/support/training_jobs.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include <catch2/catch.hpp>

#include "actorflow/runtime/core/random.hpp"

namespace af::test {

int64_t blob(int64_t split, int64_t i, int64_t classes, float* x) {
  record_rng rng{static_cast<uint64_t>(split), 17, static_cast<uint64_t>(i)};
  double best = -1e9;
  int64_t label = 0;
  for (int d = 0; d < 4; ++d)
    x[d] = static_cast<float>(rng.uniform(-1, 1));
  for (int64_t c = 0; c < classes; ++c) {
    double score = 0;
    for (int d = 0; d < 4; ++d)
      score += x[d] * std::cos(1.3 * static_cast<double>(c * 4 + d));
    if (score > best) {
      best = score;
      label = c;
    }
  }
  return label;
}

namespace {

class blob_source : public stage_logic {
public:
  blob_source(const stage_info& info, const topology::Stage& s)
    : records_(option(s, "records", 2000)), classes_(option(s, "classes", 3)),
      split_(option(s, "split", 0)), nan_at_(option(s, "nan_at", -1)),
      epochs_(option(s, "epochs", 1)), stride_(info.replicas),
      next_(info.replica) {}

  bool produce(emitter& out) override {
    if (epoch_ >= epochs_)
      return false;
    int64_t n = 0;
    auto x = tensor::allocate(dtype::f32, {32, 4});
    auto y = tensor::allocate(dtype::i64, {32});
    auto* xp = x.mutable_data_as<float>();
    auto* yp = y.mutable_data_as<int64_t>();
    for (; n < 32 && next_ < records_; ++n, next_ += stride_) {
      yp[n] = blob(split_, next_, classes_, xp + n * 4);
      if (next_ == nan_at_)
        xp[n * 4] = std::numeric_limits<float>::quiet_NaN();
    }
    if (n > 0) {
      batch b;
      b.seq = seq_++;
      b.epoch = static_cast<uint64_t>(epoch_);
      b.set("x", x);
      b.set("label", y);
      if (n < 32) {
        auto x2 = tensor::allocate(dtype::f32, {n, 4});
        auto y2 = tensor::allocate(dtype::i64, {n});
        std::copy_n(xp, n * 4, x2.mutable_data_as<float>());
        std::copy_n(yp, n, y2.mutable_data_as<int64_t>());
        b.set("x", x2);
        b.set("label", y2);
      }
      out.push(std::move(b));
    }
    if (next_ >= records_) {
      out.end_epoch(static_cast<uint64_t>(epoch_));
      ++epoch_;
      next_ = next_ % stride_;
    }
    return epoch_ < epochs_;
  }

private:
  int64_t records_, classes_, split_, nan_at_, epochs_, stride_, next_;
  int64_t epoch_ = 0;
  uint64_t seq_ = 0;
};

} // namespace

training_fixture::training_fixture() {
  stage_type t;
  t.name = "blob_source";
  t.kind = stage_kind::source;
  t.make = [](const stage_info& info, const topology::Stage& s) {
    return std::make_shared<blob_source>(info, s);
  };
  reg.add(std::move(t));
}

// A blob job: model, optimizer and ps blocks and extra trainer config are
// spliced in.
std::string blob_job(const std::string& training, const std::string& trainer,
                     const std::string& train_options, int64_t replicas) {
  return R"(
name: "blobs"
runtime { seed: 3 metrics_interval_s: 0.05 }
training {
)" + training + R"(
}
stage { name: "src" type: "blob_source"
  options { key: "records" value: "4000" }
  options { key: "epochs" value: "4" }
)" + train_options + R"(
}
stage { name: "batch" type: "batcher" input { stage: "src" }
  batcher { batch_size: 32 } }
stage { name: "train" type: "trainer" replicas: )"
         + std::to_string(replicas) + R"(
  input { stage: "batch" window: 2 } trainer { )"
         + trainer + R"( } }
stage { name: "test" type: "blob_source"
  options { key: "records" value: "1000" }
  options { key: "split" value: "99" } }
stage { name: "test_batch" type: "batcher" input { stage: "test" }
  batcher { batch_size: 250 } }
stage { name: "eval" type: "evaluator" input { stage: "test_batch" }
  evaluator { every_steps: 50 } }
)";
}

const std::string mlp = R"(
  model { input: "x" input_shape: [4]
    layer { type: "dense" units: 16 } layer { type: "relu" }
    layer { type: "dense" units: 3 } }
  optimizer { type: "momentum" learning_rate: 0.05 }
  ps { shards: 2 })";

// The errors of the blob job with `trainer` options, which must not load.
std::string validation_errors(const registry& reg,
                              const std::string& trainer) {
  auto res = load_topology_text(blob_job(mlp, trainer), "job.pbtxt", reg);
  REQUIRE_FALSE(res.ok());
  std::string all;
  for (auto& e : res.errors)
    all += e.to_string() + "\n";
  return all;
}

} // namespace af::test
