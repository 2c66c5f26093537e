// The evaluator: AUC with ties, its periodic results in the job's
// progress, and the final evaluation's predictions file.
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

TEST_CASE("AUC counts ties as one half") {
  CHECK(roc_auc({0.1f, 0.4f, 0.35f, 0.8f}, {0, 0, 1, 1}) == Approx(0.75));
  CHECK(roc_auc({0.5f, 0.5f}, {0, 1}) == Approx(0.5));
  CHECK(roc_auc({1, 2, 3}, {1, 1, 1}) == Approx(0.5));
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
