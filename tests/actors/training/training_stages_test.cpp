// Training through whole jobs: trainers, parameter-server shards and the
// evaluator, on data whose best answer is known.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>

#include <caf/exit_reason.hpp>
#include <caf/send.hpp>

#include "actorflow/actors/ps_shard/ps_shard.hpp"
#include "actorflow/actors/training/evaluator.hpp"
#include "actorflow/actors/training/host_batch.hpp"
#include "actorflow/runtime/core/random.hpp"
#include "actorflow/runtime/ps/ps_client.hpp"
#include "tests/support/harness.hpp"
#include "tests/support/temp_dir.hpp"

using namespace af;
using namespace af::test;

namespace {

// Gaussian blobs: x f32 [n, 4], label = the class whose fixed direction
// scores highest, so that a linear model can reach ~100%. Options: records,
// classes (labels in [0, classes)), split (seed of the split), nan_at (the
// record whose features are NaN; -1: none), epochs.
// Record i of split `split`: its 4 features into x, its label returned.
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

struct training_fixture : fixture {
  training_fixture() {
    stage_type t;
    t.name = "blob_source";
    t.kind = stage_kind::source;
    t.make = [](const stage_info& info, const topology::Stage& s) {
      return std::make_shared<blob_source>(info, s);
    };
    reg.add(std::move(t));
  }
};

// A blob job: model, optimizer and ps blocks and extra trainer config are
// spliced in.
std::string blob_job(const std::string& training, const std::string& trainer,
                     const std::string& train_options = "",
                     int64_t replicas = 2) {
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

} // namespace

TEST_CASE_METHOD(training_fixture, "two asynchronous trainers learn separable "
                                   "blobs to high test accuracy") {
  auto r = run_text(sys, reg, blob_job(mlp, "log_every_steps: 0"));
  REQUIRE(r.ok);
  CHECK(r.tolerated_failures.empty());
  // 4 epochs of 4000 records in batches of 32, split over two trainers.
  auto steps = metric_of(r, "train[0]", "step") + metric_of(r, "train[1]", "step");
  CHECK(steps == 4 * 4000 / 32);
  CHECK(metric_of(r, "train[0]", "step") > 0);
  CHECK(metric_of(r, "train[1]", "step") > 0);
  CHECK(metric_of(r, "eval[0]", "test_accuracy") >= 0.9);
  CHECK(metric_of(r, "eval[0]", "eval_step") == steps);
  CHECK(metric_of(r, "eval[0]", "evaluations") >= 2);
}

TEST_CASE_METHOD(training_fixture, "synchronous training with staleness 0 "
                                   "converges like asynchronous") {
  auto sync = mlp;
  sync.replace(sync.find("ps { shards: 2 }"), 16,
               "ps { shards: 2 staleness: 0 }");
  auto r = run_text(sys, reg, blob_job(sync, ""));
  REQUIRE(r.ok);
  CHECK(metric_of(r, "eval[0]", "test_accuracy") >= 0.9);
  // At tau = 0 no push is ever applied on parameters older than one clock.
  CHECK(metric_of(r, "train[0]", "staleness_max") <= 1);
}

TEST_CASE_METHOD(training_fixture, "a trainer that fails mid-run does not "
                                   "stop the others and the job finishes") {
  auto r = run_text(sys, reg,
                    blob_job(mlp, "fail_at_step: 20 fail_replica: 1"));
  REQUIRE(r.ok);
  REQUIRE(r.tolerated_failures.size() == 1);
  CHECK(r.tolerated_failures[0].find("train[1]") != std::string::npos);
  CHECK(r.tolerated_failures[0].find("fault injection") != std::string::npos);
  // The surviving trainer took over the rest of the data (minus what was
  // in flight to the failed one) and the evaluator ran at the end.
  CHECK(metric_of(r, "train[0]", "step") > 250);
  CHECK(metric_of(r, "eval[0]", "test_accuracy") >= 0.85);
}

TEST_CASE_METHOD(training_fixture, "every trainer failing fails the job") {
  auto r = run_text(sys, reg, blob_job(mlp, "fail_at_step: 5", "", 1));
  REQUIRE_FALSE(r.ok);
  CHECK(r.error.find("fault injection") != std::string::npos);
}

TEST_CASE_METHOD(training_fixture, "bad training input is a clear error") {
  SECTION("a label outside the classes") {
    auto r = run_text(sys, reg,
                      blob_job(mlp, "",
                               R"(options { key: "classes" value: "5" })"));
    REQUIRE_FALSE(r.ok);
    CHECK(r.error.find("outside the model's classes [0, 3)")
          != std::string::npos);
  }
  SECTION("an input that does not fit the model") {
    auto wrong = mlp;
    wrong.replace(wrong.find("input_shape: [4]"), 16, "input_shape: [5]");
    auto r = run_text(sys, reg, blob_job(wrong, ""));
    REQUIRE_FALSE(r.ok);
    CHECK(r.error.find("field 'x' has 4 values per record") != std::string::npos);
    CHECK(r.error.find("needs 5") != std::string::npos);
  }
  SECTION("NaN gradients are skipped and counted by default") {
    auto r = run_text(sys, reg,
                      blob_job(mlp, "", R"(options { key: "nan_at" value: "7" })"));
    REQUIRE(r.ok);
    // Record 7 comes once per epoch.
    auto skipped = metric_of(r, "train[0]", "skipped_steps")
                   + metric_of(r, "train[1]", "skipped_steps");
    CHECK(skipped == 4);
    CHECK(metric_of(r, "eval[0]", "test_accuracy") >= 0.9);
  }
  SECTION("NaN gradients stop the job when the policy says fail") {
    auto failing = mlp + "\n  on_nonfinite: \"fail\"";
    auto r = run_text(sys, reg,
                      blob_job(failing, "", R"(options { key: "nan_at" value: "7" })", 1));
    REQUIRE_FALSE(r.ok);
    CHECK(r.error.find("gradient of variable '0_dense/kernel' has NaN or Inf")
          != std::string::npos);
  }
}

TEST_CASE_METHOD(training_fixture, "training sections are validated with the "
                                   "line of the problem") {
  auto check = [&](const std::string& training, const std::string& expect) {
    auto res = load_topology_text(blob_job(training, ""), "job.pbtxt", reg);
    REQUIRE_FALSE(res.ok());
    std::string all;
    for (auto& e : res.errors)
      all += e.to_string() + "\n";
    INFO(all);
    CHECK(all.find(expect) != std::string::npos);
  };
  auto bad_opt = mlp;
  bad_opt.replace(bad_opt.find("\"momentum\""), 10, "\"adamw\"");
  check(bad_opt, "job.pbtxt:9: training.optimizer: unknown optimizer \"adamw\"");
  auto bad_layer = mlp;
  bad_layer.replace(bad_layer.find("\"relu\""), 6, "\"gelu\"");
  check(bad_layer, "job.pbtxt:7: training.model: layer 1");
  auto bad_stale = mlp;
  bad_stale.replace(bad_stale.find("ps { shards: 2 }"), 16,
                    "ps { shards: 2 staleness: -1 }");
  check(bad_stale, "training.ps.staleness must be >= 0");
  auto bad_wire = mlp;
  bad_wire.replace(bad_wire.find("ps { shards: 2 }"), 16,
                   "ps { shards: 2 wire: \"fp8\" }");
  check(bad_wire, "training.ps.wire must be \"f32\", \"bf16\" or \"f16\", "
                  "got \"fp8\"");
}

TEST_CASE("AUC counts ties as one half") {
  CHECK(roc_auc({0.1f, 0.4f, 0.35f, 0.8f}, {0, 0, 1, 1}) == Approx(0.75));
  CHECK(roc_auc({0.5f, 0.5f}, {0, 1}) == Approx(0.5));
  CHECK(roc_auc({1, 2, 3}, {1, 1, 1}) == Approx(0.5));
}

TEST_CASE_METHOD(training_fixture, "a CTR model with sharded embeddings gets "
                                   "close to the planted model's AUC") {
  auto text = R"(
name: "ctr"
runtime { seed: 5 metrics_interval_s: 0.05 }
training {
  model { input: "ids" input_shape: [4]
    layer { type: "embedding" rows: 80 dim: 2 }
    layer { type: "flatten" }
    layer { type: "dense" units: 1 }
    loss: "sigmoid_binary_cross_entropy" }
  optimizer { type: "adagrad" learning_rate: 0.2 }
  ps { shards: 3 staleness: 1 }
}
stage { name: "clicks" type: "ctr_source"
  ctr_source { records: 20000 features: 4 vocabulary: 20 epochs: 3 } }
stage { name: "batch" type: "batcher" input { stage: "clicks" }
  batcher { batch_size: 128 } }
stage { name: "train" type: "trainer" replicas: 2 input { stage: "batch" } }
stage { name: "test" type: "ctr_source"
  ctr_source { records: 5000 features: 4 vocabulary: 20 split_seed: 9 } }
stage { name: "test_batch" type: "batcher" input { stage: "test" }
  batcher { batch_size: 1000 } }
stage { name: "eval" type: "evaluator" input { stage: "test_batch" }
  evaluator { reference_score: "logit" } }
)";
  auto r = run_text(sys, reg, text);
  REQUIRE(r.ok);
  auto auc = metric_of(r, "eval[0]", "test_auc");
  auto best = metric_of(r, "eval[0]", "reference_auc");
  CHECK(best > 0.7);
  CHECK(auc > best - 0.02);
  CHECK(auc <= best + 0.02);
}

TEST_CASE_METHOD(training_fixture, "one trainer reads its own updates unless "
                                   "it prefetches parameters") {
  SECTION("pull after push: staleness 0") {
    auto r = run_text(sys, reg, blob_job(mlp, "prefetch: false", "", 1));
    REQUIRE(r.ok);
    CHECK(metric_of(r, "train[0]", "staleness_max") == 0);
    CHECK(metric_of(r, "eval[0]", "test_accuracy") >= 0.9);
  }
  SECTION("prefetch: every step reads parameters one update old") {
    auto r = run_text(sys, reg, blob_job(mlp, "prefetch: true", "", 1));
    REQUIRE(r.ok);
    CHECK(metric_of(r, "train[0]", "staleness_max") == 1);
    CHECK(metric_of(r, "train[0]", "staleness_mean") > 0.9);
    CHECK(metric_of(r, "eval[0]", "test_accuracy") >= 0.9);
  }
  SECTION("a staleness bound turns prefetching off") {
    auto bounded = mlp;
    bounded.replace(bounded.find("ps { shards: 2 }"), 16,
                    "ps { shards: 2 staleness: 3 }");
    auto r = run_text(sys, reg, blob_job(bounded, "prefetch: true", "", 1));
    REQUIRE(r.ok);
    CHECK(metric_of(r, "train[0]", "staleness_max") == 0);
  }
}

TEST_CASE("RGB images in image_decode's HWC layout reach conv2d as CHW") {
  training_spec spec;
  spec.input = "image";
  spec.label = "label";
  spec.model.input_shape = {3, 2, 2};
  spec.model.layers = {gpu::layer_spec{}};
  spec.model.layers[0].type = "conv2d";
  spec.model.layers[0].filters = 1;
  spec.model.layers[0].kernel = 1;
  spec.model.layers.push_back(gpu::layer_spec{});
  spec.model.layers[1].type = "dense";
  spec.model.layers[1].units = 2;
  spec.model.loss = "softmax_cross_entropy";
  batch b;
  auto img = tensor::allocate(dtype::f32, {1, 2, 2, 3}); // h, w, c
  auto* p = img.mutable_data_as<float>();
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 2; ++x)
      for (int c = 0; c < 3; ++c)
        p[(y * 2 + x) * 3 + c] = static_cast<float>(100 * c + 10 * y + x);
  auto label = tensor::allocate(dtype::i64, {1});
  *label.mutable_data_as<int64_t>() = 1;
  b.set("image", img);
  b.set("label", label);
  host_batch h;
  to_host(spec, b, h);
  REQUIRE(h.x.size() == 12);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 2; ++x)
        CHECK(h.x[static_cast<size_t>((c * 2 + y) * 2 + x)]
              == static_cast<float>(100 * c + 10 * y + x));
  // Already channels-first: left as it is.
  auto chw = tensor::allocate(dtype::f32, {1, 3, 2, 2});
  for (int i = 0; i < 12; ++i)
    chw.mutable_data_as<float>()[i] = static_cast<float>(i);
  b.set("image", chw);
  to_host(spec, b, h);
  for (int i = 0; i < 12; ++i)
    CHECK(h.x[static_cast<size_t>(i)] == static_cast<float>(i));
}

TEST_CASE_METHOD(training_fixture, "top-k sparsified pushes with error "
                                   "feedback still learn the blobs") {
  // 10% of each dense gradient per push; the other 90% is carried over
  // (error feedback), so every coordinate is applied eventually.
  auto r = run_text(sys, reg, blob_job(mlp, "topk_fraction: 0.1"));
  REQUIRE(r.ok);
  CHECK(metric_of(r, "eval[0]", "test_accuracy") >= 0.9);
}

TEST_CASE_METHOD(training_fixture, "top-k error feedback holds back no "
                                   "gradient for good") {
  // A 4 -> 2 dense layer, plain SGD with rate 1 and one sample per push,
  // so a parameter moves by exactly what was pushed for it. Half of each
  // gradient goes out per push; two pushes of g and one of zeros must
  // have moved every parameter by exactly 2 g.
  training_spec spec;
  spec.input = "x";
  spec.label = "label";
  spec.model.input_shape = {4};
  spec.model.layers = {gpu::layer_spec{}};
  spec.model.layers[0].type = "dense";
  spec.model.layers[0].units = 2;
  spec.model.loss = "softmax_cross_entropy";
  spec.params = gpu::param_specs(spec.model);
  REQUIRE(spec.params.size() == 2); // kernel [4, 2], bias [2]
  std::vector<caf::actor> shards;
  for (uint32_t k = 0; k < 2; ++k) {
    ps_shard_config cfg;
    cfg.shard = k;
    cfg.shards = 2;
    cfg.params = spec.params;
    cfg.optimizer.type = "sgd";
    cfg.optimizer.learning_rate = 1.0;
    cfg.expected_workers = 1;
    cfg.seed = 11;
    shards.push_back(spawn_ps_shard(sys, cfg));
  }
  auto dev = gpu::make_cpu_device();
  gpu::model m{spec.model, *dev};
  ps_client client{sys, shards, spec.params, 0};
  client.join();
  auto values = [&] {
    std::vector<float> all;
    for (size_t i = 0; i < 2; ++i) {
      std::vector<float> v(static_cast<size_t>(spec.params[i].size()));
      dev->download(v.data(), m.value(i).get(), v.size() * sizeof(float));
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  client.pull(m, 0, {});
  auto before = values();
  std::vector<float> g = {0.1f, 0.2f, 0.3f, 0.4f, 1.0f, 1.1f, 1.2f, 1.3f,
                          0.05f, 0.01f};
  std::vector<float> zero(g.size(), 0.0f);
  auto set_grads = [&](const std::vector<float>& v) {
    dev->upload(m.grad(0).get(), v.data(), 8 * sizeof(float));
    dev->upload(m.grad(1).get(), v.data() + 8, 2 * sizeof(float));
  };
  set_grads(g);
  client.push(m, 1, 1, {}, 0.5);
  set_grads(g);
  client.push(m, 2, 1, {}, 0.5);
  client.pull(m, 2, {});
  auto middle = values();
  // After two pushes the smaller half of the kernel is still held back.
  for (size_t j = 0; j < 4; ++j)
    CHECK(middle[j] == Approx(before[j]));
  for (size_t j = 4; j < 8; ++j)
    CHECK(middle[j] == Approx(before[j] - 2 * g[j]));
  set_grads(zero);
  client.push(m, 3, 1, {}, 0.5);
  client.pull(m, 3, {});
  auto after = values();
  for (size_t j = 0; j < g.size(); ++j)
    CHECK(after[j] == Approx(before[j] - 2 * g[j]).margin(1e-6));
  client.leave();
  for (auto& s : shards)
    caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
}

TEST_CASE_METHOD(training_fixture, "the evaluator's periodic results reach "
                                   "the coordinator while training runs") {
  // 100 epochs of 4000 records, batches of 32: 12,500 steps (about 0.5 s
  // in a Release build), an evaluation every 50. The evaluator evaluates
  // inside one call (finish()); each result must still reach the progress
  // snapshots (every 50 ms here) as it is made, not only the last one at
  // the end.
  auto text = blob_job(mlp, "log_every_steps: 0");
  text.replace(text.find(R"(value: "4" })"), 13, R"(value: "100" })");
  std::mutex mtx;
  std::set<double> seen;
  std::vector<scalar_event> events;
  job_options opts;
  opts.progress_interval = std::chrono::milliseconds{1};
  opts.on_progress = [&](const job_progress& p) {
    {
      std::lock_guard<std::mutex> guard{mtx};
      events.insert(events.end(), p.scalars.begin(), p.scalars.end());
    }
    for (auto& s : p.stages)
      if (s.stage == "eval[0]")
        for (auto& m : s.metrics)
          if (m.name == "eval_step") {
            std::lock_guard<std::mutex> guard{mtx};
            seen.insert(m.value);
          }
  };
  auto r = run_text(sys, reg, text, std::chrono::seconds{120}, opts);
  REQUIRE(r.ok);
  auto steps = metric_of(r, "train[0]", "step") + metric_of(r, "train[1]", "step");
  REQUIRE(steps == 12500);
  std::lock_guard<std::mutex> guard{mtx};
  std::set<double> before_end;
  for (auto step : seen)
    if (step < steps)
      before_end.insert(step);
  INFO("evaluation steps seen in progress snapshots: " << seen.size());
  CHECK(before_end.size() >= 3);
  // Every evaluation also comes once as step-stamped values (for
  // TensorBoard), in order, the last at the final step.
  events.insert(events.end(), r.final.scalars.begin(), r.final.scalars.end());
  std::vector<int64_t> accuracy_steps;
  for (auto& e : events) {
    if (e.name == "eval/test_accuracy") {
      CHECK(e.value >= 0);
      CHECK(e.value <= 1);
      accuracy_steps.push_back(e.step);
    } else {
      CHECK(e.name == "eval/test_loss");
    }
  }
  CHECK(static_cast<double>(accuracy_steps.size())
        == metric_of(r, "eval[0]", "evaluations"));
  CHECK(events.size() == 2 * accuracy_steps.size());
  CHECK(std::is_sorted(accuracy_steps.begin(), accuracy_steps.end()));
  CHECK(std::adjacent_find(accuracy_steps.begin(), accuracy_steps.end())
        == accuracy_steps.end());
  REQUIRE_FALSE(accuracy_steps.empty());
  CHECK(accuracy_steps.back() == 12500);
}

TEST_CASE_METHOD(training_fixture, "the evaluator writes the final "
                                   "evaluation's predictions, a line per "
                                   "record") {
  temp_dir dir;
  auto file = dir.file("predictions.txt");
  auto text = blob_job(mlp, "log_every_steps: 0");
  text.replace(text.find("evaluator { every_steps: 50 }"), 29,
               "evaluator { every_steps: 50 predictions: \"" + file + "\" }");
  auto r = run_text(sys, reg, text);
  REQUIRE(r.ok);
  // The test split's 1,000 records in order, each with its 3 logits: their
  // argmax is right exactly as often as the evaluator reported, and their
  // softmax cross-entropy is its test loss.
  std::ifstream in{file};
  REQUIRE(in);
  int64_t records = 0, correct = 0;
  double loss = 0;
  for (std::string line; std::getline(in, line); ++records) {
    std::istringstream fields{line};
    std::vector<double> logits{std::istream_iterator<double>{fields}, {}};
    REQUIRE(logits.size() == 3);
    float x[4];
    auto label = blob(99, records, 3, x);
    auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
    correct += best == label ? 1 : 0;
    double top = *std::max_element(logits.begin(), logits.end()), sum = 0;
    for (auto l : logits)
      sum += std::exp(l - top);
    loss += std::log(sum) + top - logits[static_cast<size_t>(label)];
  }
  CHECK(records == 1000);
  CHECK(static_cast<double>(correct) / 1000
        == metric_of(r, "eval[0]", "test_accuracy"));
  CHECK(loss / 1000 == Approx(metric_of(r, "eval[0]", "test_loss")).epsilon(1e-5));
  CHECK_FALSE(std::filesystem::exists(file + ".tmp"));
  // A file that cannot be written fails the job before it trains.
  auto bad = blob_job(mlp, "log_every_steps: 0");
  bad.replace(bad.find("evaluator { every_steps: 50 }"), 29,
              "evaluator { predictions: \"" + dir.file("no/p.txt")
                + "\" }");
  CHECK_THROWS_WITH(run_text(sys, reg, bad),
                    Catch::Contains("evaluator.predictions: cannot write '"
                                    + dir.file("no/p.txt")));
}

TEST_CASE_METHOD(training_fixture, "every n-th step is timed, and its phases "
                                   "add up to the step") {
  auto r = run_text(sys, reg,
                    blob_job(mlp, "log_every_steps: 0 timing_every_steps: 5"));
  REQUIRE(r.ok);
  for (std::string t : {"train[0]", "train[1]"}) {
    INFO(t);
    auto steps = metric_of(r, t, "step");
    // The last step (trained when the input ends) is not timed.
    auto timed = metric_of(r, t, "timed_steps");
    CHECK(timed >= std::floor((steps - 1) / 5));
    CHECK(timed <= std::floor(steps / 5));
    auto step = metric_of(r, t, "step_ms");
    auto parts = metric_of(r, t, "prepare_ms") + metric_of(r, t, "pull_ms")
                 + metric_of(r, t, "input_wait_ms")
                 + metric_of(r, t, "compute_ms") + metric_of(r, t, "push_ms");
    auto gap = metric_of(r, t, "gap_ms");
    CHECK(step > 0);
    CHECK(metric_of(r, t, "compute_ms") > 0);
    CHECK(metric_of(r, t, "pull_ms") > 0);
    CHECK(metric_of(r, t, "push_ms") > 0);
    CHECK(gap >= 0);
    CHECK(parts + gap == Approx(std::max(step, parts)).epsilon(1e-6));
    // The device's own times lie inside the host's phases that hold them.
    CHECK(metric_of(r, t, "compute_ms")
          <= metric_of(r, t, "compute_host_ms") + 1e-9);
    CHECK(metric_of(r, t, "param_h2d_ms") <= metric_of(r, t, "pull_ms"));
    CHECK(metric_of(r, t, "grad_d2h_ms") <= metric_of(r, t, "push_ms"));
    auto busy = metric_of(r, t, "device_busy");
    CHECK(busy > 0);
    CHECK(busy <= 1);
  }

  auto off = run_text(
    sys, reg, blob_job(mlp, "log_every_steps: 0 timing_every_steps: 0"));
  REQUIRE(off.ok);
  for (auto& m : stats_of(off, "train[0]").metrics)
    CHECK(m.name != "timed_steps");
}

TEST_CASE_METHOD(training_fixture, "a precision other than fp32 needs a CUDA "
                                   "device, and is named") {
  auto e = validation_errors(reg, "precision: \"bf16\"");
  CHECK_THAT(e, Catch::Contains("job.pbtxt:19: stage 'train' (trainer): "
                                "precision \"bf16\" needs a CUDA device "
                                     "(device: \"cuda\"): the cpu device "
                                     "computes in fp32 only"));
  e = validation_errors(reg, "device: \"cpu\" precision: \"tf32\"");
  CHECK_THAT(e, Catch::Contains("precision \"tf32\" needs a CUDA device"));
  e = validation_errors(reg, "device: \"cuda\" precision: \"fp16\"");
  CHECK_THAT(e, Catch::Contains("precision must be \"fp32\", \"tf32\" or "
                                "\"bf16\", got \"fp16\""));
  e = validation_errors(reg, "timing_every_steps: -1");
  CHECK_THAT(e, Catch::Contains("timing_every_steps must be >= 0"));
  // fp32 is the default, and any device takes it.
  CHECK(load_topology_text(blob_job(mlp, "precision: \"fp32\""), "job.pbtxt",
                           reg)
          .ok());
}

TEST_CASE_METHOD(training_fixture, "devices assigns each replica its device "
                                   "in turn") {
  // No machine has GPU 99 (and a build without CUDA has none): the replica
  // given it cannot be created, and the job's error names it; the one
  // given the cpu is not named.
  auto failure_of = [&](const std::string& trainer) -> std::string {
    try {
      auto r = run_text(sys, reg, blob_job(mlp, trainer));
      return r.ok ? std::string("(the job ran)") : r.error;
    } catch (const std::exception& e) {
      return e.what();
    }
  };
  auto e = failure_of(R"(devices: ["cpu", "cuda:99"])");
  CHECK_THAT(e, Catch::Contains("stage train[1]: cannot create: "));
  CHECK_THAT(e, !Catch::Contains("train[0]"));
  e = failure_of(R"(devices: ["cuda:99", "cpu"])");
  CHECK_THAT(e, Catch::Contains("stage train[0]: cannot create: "));
  CHECK_THAT(e, !Catch::Contains("train[1]"));
  // All on the cpu: it trains.
  auto cpu = run_text(sys, reg,
                      blob_job(mlp, R"(log_every_steps: 0 devices: ["cpu"])"));
  REQUIRE(cpu.ok);
  CHECK(metric_of(cpu, "eval[0]", "test_accuracy") >= 0.9);

  CHECK_THAT(validation_errors(reg, R"(device: "cpu" devices: ["cuda:0"])"),
             Catch::Contains("set device or devices, not both"));
  CHECK_THAT(validation_errors(reg, R"(devices: ["cuda:0", "tpu"])"),
             Catch::Contains("devices must be \"cpu\", \"cuda\" or \"cuda:N\", "
                             "got \"tpu\""));
  CHECK_THAT(validation_errors(
               reg, R"(devices: ["cuda:0", "cpu"] precision: "tf32")"),
             Catch::Contains("precision \"tf32\" needs a CUDA device"));
}
