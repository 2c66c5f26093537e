// The trainer through whole jobs on data whose best answer is known:
// asynchronous and synchronous training, failed trainers, bad input,
// sharded embeddings, reading its own updates, top-k pushes, step timing,
// precision and devices.
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
#include "tests/support/training_jobs.hpp"

using namespace af;
using namespace af::test;

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
