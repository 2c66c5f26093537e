// trainer { concurrent_steps }: the slots (actors/training/step_slots.hpp) and a
// job whose trainers take them.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "actorflow/actors/training/step_slots.hpp"
#include "tests/support/harness.hpp"

using namespace af;
using namespace af::test;
using namespace std::chrono_literals;

TEST_CASE("step slots: never more holders at once than slots") {
  step_slots slots{2};
  std::atomic<int> now{0}, most{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 40; ++i) {
        auto turn = slots.acquire();
        int n = ++now;
        int m = most.load();
        while (n > m && !most.compare_exchange_weak(m, n)) {
        }
        std::this_thread::sleep_for(200us);
        --now;
      }
    });
  for (auto& t : threads)
    t.join();
  // Both slots were used at once (6 threads wanted them), never a third.
  CHECK(most.load() == 2);
  CHECK(slots.taken() == 0);
}

TEST_CASE("step slots: a caller waits until a slot is given back") {
  step_slots slots{2};
  auto a = slots.acquire();
  auto b = slots.acquire();
  CHECK(slots.taken() == 2);
  std::atomic<bool> got{false};
  std::thread third([&] {
    auto c = slots.acquire();
    got = true;
  });
  std::this_thread::sleep_for(100ms);
  CHECK_FALSE(got.load());
  a = step_slots::lease{}; // given back
  third.join();
  CHECK(got.load());
  CHECK(b.held());
  CHECK(slots.taken() == 1);
}

TEST_CASE("step slots: a step that throws gives its slot back") {
  step_slots slots{1};
  CHECK_THROWS_AS(
    [&] {
      auto turn = slots.acquire();
      throw std::runtime_error("the step failed");
    }(),
    std::runtime_error);
  CHECK(slots.taken() == 0);
  auto again = slots.acquire(); // does not block
  CHECK(again.held());
}

TEST_CASE("step slots: shared by key while someone holds them") {
  auto a = step_slots::shared("job#1/train", 2);
  auto b = step_slots::shared("job#1/train", 5); // the first count holds
  auto other = step_slots::shared("job#2/train", 3);
  CHECK(a == b);
  CHECK(b->count() == 2);
  CHECK(other != a);
  CHECK(other->count() == 3);
  a.reset();
  b.reset();
  // Nobody holds job#1's any more: a new job with that key starts afresh.
  CHECK(step_slots::shared("job#1/train", 4)->count() == 4);
  CHECK_THROWS_AS(step_slots{0}, std::invalid_argument);
}

namespace {

// A CTR job: 4 asynchronous trainers in this process, `trainer` spliced
// into their config and `ps` into the ps block.
std::string ctr_job(const std::string& trainer, const std::string& ps = "") {
  return R"(
name: "ctr"
runtime { seed: 7 metrics_interval_s: 0.05 }
training {
  model { input: "ids" input_shape: [4]
    layer { type: "embedding" rows: 80 dim: 2 }
    layer { type: "flatten" }
    layer { type: "dense" units: 1 }
    loss: "sigmoid_binary_cross_entropy" }
  optimizer { type: "adagrad" learning_rate: 0.2 }
  ps { shards: 2 )" + ps + R"( }
}
stage { name: "clicks" type: "ctr_source"
  ctr_source { records: 20000 features: 4 vocabulary: 20 epochs: 2 } }
stage { name: "batch" type: "batcher" input { stage: "clicks" }
  batcher { batch_size: 100 } }
stage { name: "train" type: "trainer" replicas: 4 input { stage: "batch" }
  trainer { log_every_steps: 0 )" + trainer + R"( } }
stage { name: "test" type: "ctr_source"
  ctr_source { records: 5000 features: 4 vocabulary: 20 split_seed: 9 } }
stage { name: "test_batch" type: "batcher" input { stage: "test" }
  batcher { batch_size: 1000 } }
stage { name: "eval" type: "evaluator" input { stage: "test_batch" }
  evaluator { reference_score: "logit" } }
)";
}

} // namespace

TEST_CASE_METHOD(fixture, "concurrent_steps 1: four trainers step one at a "
                          "time, each on every update before it") {
  auto r = run_text(sys, reg, ctr_job("concurrent_steps: 1"));
  REQUIRE(r.ok);
  double steps = 0;
  for (int i = 0; i < 4; ++i) {
    auto label = "train[" + std::to_string(i) + "]";
    INFO(label);
    // One step at a time, its push sent before the next pull: no update is
    // ever applied on parameters another update changed since its pull.
    CHECK(metric_of(r, label, "staleness_max") == 0);
    CHECK(metric_of(r, label, "wait_slot_s") >= 0);
    steps += metric_of(r, label, "step");
  }
  CHECK(steps == 2 * 20000 / 100);
  auto auc = metric_of(r, "eval[0]", "test_auc");
  CHECK(auc > metric_of(r, "eval[0]", "reference_auc") - 0.02);
}

TEST_CASE_METHOD(fixture, "concurrent_steps is validated") {
  auto errors = [&](const std::string& trainer, const std::string& ps) {
    auto res = load_topology_text(ctr_job(trainer, ps), "job.pbtxt", reg);
    REQUIRE_FALSE(res.ok());
    std::string all;
    for (auto& e : res.errors)
      all += e.to_string() + "\n";
    return all;
  };
  using Catch::Matchers::Contains;
  CHECK_THAT(errors("concurrent_steps: -1", ""),
             Contains("concurrent_steps must be >= 0 (0: no bound), got -1"));
  CHECK_THAT(errors("concurrent_steps: 2 prefetch: true", ""),
             Contains("set concurrent_steps or prefetch, not both"));
  // (Line 18: the trainer block's, where concurrent_steps is.)
  CHECK_THAT(errors("concurrent_steps: 2", "staleness: 1"),
             Contains("job.pbtxt:18: stage 'train': concurrent_steps cannot "
                      "go with training.ps.staleness"));
  // Unset or 0: no bound, and no slot metric.
  auto r = run_text(sys, reg, ctr_job("concurrent_steps: 0"));
  REQUIRE(r.ok);
  bool slot_metric = false;
  for (auto& m : stats_of(r, "train[0]").metrics)
    slot_metric = slot_metric || m.name == "wait_slot_s";
  CHECK_FALSE(slot_metric);
  CHECK(metric_of(r, "train[0]", "step") > 0);
}
