// The job supervisor (runtime/job/supervisor.hpp) in-process: a run to its
// end with the callbacks in their order, an interrupt that stops a job and
// a later one that aborts it, and a start or a callback that fails.
#include <catch2/catch.hpp>

#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "actorflow/runtime/job/supervisor.hpp"
#include "tests/support/harness.hpp"

using namespace af;
using namespace af::test;

namespace {

// `items` items of 64 bytes from one source to one sink that sleeps
// `sleep_us` per item.
loaded_topology supervised_topology(const registry& reg, int items, int sleep_us) {
  auto text = R"(
    stage { name: "src" type: "test_source"
            options { key: "items" value: ")"
              + std::to_string(items) + R"(" } }
    stage { name: "sink" type: "test_sink" input { stage: "src" }
            options { key: "sleep_us" value: ")"
              + std::to_string(sleep_us) + R"(" } }
  )";
  auto loaded = load_topology_text(text, "supervised.pbtxt", reg);
  REQUIRE(loaded.ok());
  return *loaded.topology;
}

} // namespace

TEST_CASE_METHOD(fixture, "the supervisor runs a job to its end and calls "
                          "prepare, then started, once each",
                 "[supervisor]") {
  auto topo = supervised_topology(reg, 500, 0);
  std::vector<std::string> calls;
  supervise_options o;
  o.prepare = [&](const loaded_topology& t, job_options&) {
    CHECK(t.spec.stage_size() == 2);
    calls.push_back("prepare");
  };
  o.started = [&](job&, int restarts) {
    CHECK(restarts == 0);
    calls.push_back("started");
  };
  o.stopping = [&] { calls.push_back("stopping"); };
  auto run = supervise(sys, topo, reg, std::move(o));
  CHECK(run.started);
  CHECK_FALSE(run.interrupted);
  REQUIRE(run.result.ok);
  CHECK(run.result.final.records == 500);
  CHECK(run.result.restarts.empty());
  CHECK(calls == std::vector<std::string>{"prepare", "started"});
}

TEST_CASE_METHOD(fixture, "an interrupt stops the supervised job early and a "
                          "later one aborts it",
                 "[supervisor]") {
  std::atomic<int> interrupts{0};
  bool stopping = false, aborted = false;
  supervise_options o;
  o.interrupts = [&] { return interrupts.load(); };
  o.stopping = [&] { stopping = true; };
  o.aborted = [&] { aborted = true; };
  SECTION("one interrupt drains the job") {
    // 10,000 items at 1 ms: ten seconds unless the interrupt stops it.
    o.started = [&](job&, int) { interrupts = 1; };
    auto run = supervise(sys, supervised_topology(reg, 10000, 1000), reg,
                         std::move(o));
    CHECK(run.started);
    CHECK(run.interrupted);
    CHECK(stopping);
    CHECK_FALSE(aborted);
    CHECK(run.result.stopped);
    CHECK(run.result.final.records < 10000);
  }
  SECTION("a second interrupt, well after the first, aborts it") {
    // A sink that takes a second per item: the drain cannot finish.
    o.started = [&](job&, int) { interrupts = 1; };
    o.stopping = [&] {
      stopping = true;
      std::thread{[&] {
        std::this_thread::sleep_for(std::chrono::milliseconds{700});
        interrupts = 2;
      }}.detach();
    };
    auto run = supervise(sys, supervised_topology(reg, 1000, 1000000), reg,
                         std::move(o));
    CHECK(run.interrupted);
    CHECK(stopping);
    CHECK(aborted);
    CHECK_FALSE(run.result.ok);
    CHECK_THAT(run.result.error,
               Catch::Matchers::Contains("aborted by a second interrupt"));
  }
}

TEST_CASE_METHOD(fixture, "a callback that throws fails the supervised run "
                          "with its message",
                 "[supervisor]") {
  auto topo = supervised_topology(reg, 100000, 100);
  supervise_options o;
  SECTION("in prepare: the job never starts") {
    o.prepare = [](const loaded_topology&, job_options&) {
      throw std::runtime_error("no endpoint");
    };
    bool started = false;
    o.started = [&](job&, int) { started = true; };
    auto run = supervise(sys, topo, reg, std::move(o));
    CHECK_FALSE(run.started);
    CHECK_FALSE(started);
    CHECK(run.result.error == "no endpoint");
  }
  SECTION("in started: the job is aborted") {
    o.started = [](job&, int) { throw std::runtime_error("no logdir"); };
    auto run = supervise(sys, topo, reg, std::move(o));
    CHECK_FALSE(run.started);
    CHECK(run.result.error == "no logdir");
  }
}
