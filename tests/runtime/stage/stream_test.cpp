// The stream protocol end to end: real stage actors, real coordinator.
#include <catch2/catch.hpp>

#include <algorithm>
#include <future>
#include <map>
#include <set>
#include <thread>

#include <caf/exit_reason.hpp>
#include <caf/send.hpp>

#include "tests/support/harness.hpp"

using namespace af;
using namespace af::test;

namespace {

uint64_t max_in_flight(const stage_stats& s) {
  uint64_t m = 0;
  for (auto& e : s.out_edges)
    m = std::max(m, e.max_in_flight_items);
  return m;
}

} // namespace

TEST_CASE_METHOD(
  fixture,
  "slow consumer bounds in-flight items to the window and memory "
  "stays flat over 1e6 items",
  "[stream][slow]") {
  constexpr uint64_t window = 16;
  constexpr int64_t items = 1000000;
  // The consumer does ten times the producer's work per item.
  auto text = R"(
    stage { name: "src" type: "test_source"
            options { key: "items" value: "1000000" }
            options { key: "item_bytes" value: "64" }
            options { key: "work_ns" value: "100" } }
    stage { name: "sink" type: "test_sink"
            input { stage: "src" window: 16 }
            options { key: "work_ns" value: "1000" } }
  )";
  std::atomic<bool> running{true};
  std::atomic<uint64_t> baseline{0}, peak{0};
  std::thread sampler{[&] {
    while (running) {
      auto done = obs->items.load();
      auto rss = rss_bytes();
      if (done >= items / 10 && baseline == 0)
        baseline = rss;
      if (baseline != 0)
        peak = std::max<uint64_t>(peak, rss);
      std::this_thread::sleep_for(std::chrono::milliseconds{20});
    }
  }};
  auto r = run_text(sys, reg, text, std::chrono::seconds{240});
  running = false;
  sampler.join();
  REQUIRE(r.ok);
  CHECK(stats_of(r, "sink[0]").items_in == items);
  auto& src = stats_of(r, "src[0]");
  REQUIRE(src.out_edges.size() == 1);
  CHECK(src.out_edges[0].window == window);
  CHECK(src.out_edges[0].max_in_flight_items <= window);
  // The window was actually used: the producer ran ahead of the consumer.
  CHECK(src.out_edges[0].max_in_flight_items == window);
  CHECK(src.wait_credit_s > 0);
  REQUIRE(baseline > 0);
  INFO("RSS after 10% " << baseline << " bytes, peak afterwards " << peak);
  // 900k more items of ~200 bytes each would be ~180 MB if they piled up.
  CHECK(peak - std::min(peak.load(), baseline.load()) < 16u * 1024 * 1024);
}

TEST_CASE_METHOD(fixture,
                 "fan-out sends more items to the replica that returns credit "
                 "faster",
                 "[stream]") {
  // Replica 0 needs 6 ms per item, replica 1 needs 2 ms: speeds 1x and 3x.
  auto text = R"(
    stage { name: "src" type: "test_source"
            options { key: "items" value: "600" } }
    stage { name: "work" type: "test_sink" replicas: 2 blocking: true
            input { stage: "src" window: 4 }
            options { key: "sleep_us_r0" value: "6000" }
            options { key: "sleep_us_r1" value: "2000" } }
  )";
  auto r = run_text(sys, reg, text);
  REQUIRE(r.ok);
  auto slow = stats_of(r, "work[0]").items_in;
  auto fast = stats_of(r, "work[1]").items_in;
  CHECK(slow + fast == 600);
  INFO("slow replica " << slow << " items, fast replica " << fast);
  auto ratio = static_cast<double>(fast) / static_cast<double>(slow);
  CHECK(ratio > 2.0);
  CHECK(ratio < 4.5);
}

TEST_CASE_METHOD(fixture,
                 "fan-in from three producers delivers every item exactly once",
                 "[stream]") {
  auto text = R"(
    stage { name: "src" type: "test_source" replicas: 3
            options { key: "items" value: "30000" } }
    stage { name: "sink" type: "test_sink"
            input { stage: "src" window: 8 }
            options { key: "record" value: "1" } }
  )";
  auto r = run_text(sys, reg, text);
  REQUIRE(r.ok);
  REQUIRE(obs->labels.size() == 30000);
  std::vector<int64_t> seen;
  for (auto& [who, v] : obs->labels)
    seen.push_back(v);
  std::sort(seen.begin(), seen.end());
  for (int64_t i = 0; i < 30000; ++i)
    REQUIRE(seen[static_cast<size_t>(i)] == i);
  for (int p = 0; p < 3; ++p) {
    auto& s = stats_of(r, "src[" + std::to_string(p) + "]");
    CHECK(s.items_out == 10000);
    CHECK(max_in_flight(s) <= 8);
  }
}

TEST_CASE_METHOD(
  fixture, "the byte budget bounds bytes in flight with items of varying size",
  "[stream]") {
  // Items of 1 to 10 KiB, 100 items of credit but only 16 KiB of budget.
  auto text = R"(
    stage { name: "src" type: "test_source"
            options { key: "items" value: "2000" }
            options { key: "item_bytes" value: "1024" }
            options { key: "max_item_bytes" value: "10240" } }
    stage { name: "sink" type: "test_sink"
            input { stage: "src" window: 100 byte_budget: 16384 }
            options { key: "work_ns" value: "20000" } }
  )";
  auto r = run_text(sys, reg, text);
  REQUIRE(r.ok);
  auto& e = stats_of(r, "src[0]").out_edges.at(0);
  CHECK(e.items_sent == 2000);
  CHECK(e.byte_budget == 16384);
  CHECK(e.max_in_flight_bytes <= 16384);
  CHECK(e.max_in_flight_bytes > 8192); // the budget, not the window, bound
  CHECK(e.max_in_flight_items < 100);
  CHECK(stats_of(r, "sink[0]").items_in == 2000);
}

TEST_CASE_METHOD(fixture,
                 "end of stream drains the graph and every actor exits",
                 "[stream]") {
  auto text = R"(
    stage { name: "reader" type: "synthetic_source"
            synthetic_source { records: 10000 records_per_item: 32
                               epochs: 2 } }
    stage { name: "decode" type: "transform" replicas: 3
            input { stage: "reader" window: 4 } }
    stage { name: "batch" type: "batcher" input { stage: "decode" }
            batcher { batch_size: 100 } }
    stage { name: "sink" type: "sink" input { stage: "batch" } }
  )";
  auto r = run_text(sys, reg, text);
  REQUIRE(r.ok);
  CHECK_FALSE(r.stopped);
  CHECK(r.final.records == 20000);
  // 10000 records per epoch in batches of 100, remainders flushed per epoch.
  CHECK(stats_of(r, "batch[0]").records_out == 20000);
  REQUIRE(all_actors_exit(sys));
  CHECK(sys.registry().running() == 0);
}

TEST_CASE_METHOD(fixture,
                 "a failing stage ends the job with its name and cause",
                 "[stream]") {
  auto text = R"(
    stage { name: "src" type: "test_source"
            options { key: "items" value: "100000" } }
    stage { name: "boom" type: "test_map" input { stage: "src" }
            options { key: "fail_at" value: "5" } }
    stage { name: "sink" type: "test_sink" input { stage: "boom" } }
  )";
  auto r = run_text(sys, reg, text);
  CHECK_FALSE(r.ok);
  CHECK(r.error.find("boom[0]") != std::string::npos);
  CHECK(r.error.find("injected failure at item 5") != std::string::npos);
  CHECK(r.error.find('\n') == std::string::npos);
  REQUIRE(all_actors_exit(sys));
}

TEST_CASE_METHOD(
  fixture,
  "a consumer replica that goes down fails the job at once instead "
  "of hanging",
  "[stream]") {
  auto text = R"(
    stage { name: "src" type: "test_source"
            options { key: "items" value: "100000000" } }
    stage { name: "work" type: "test_sink" replicas: 2
            input { stage: "src" window: 4 }
            options { key: "sleep_us" value: "100" } }
  )";
  auto loaded = load_topology_text(text, "t", reg);
  REQUIRE(loaded.ok());
  auto j = job::start(sys, *loaded.topology, reg);
  std::this_thread::sleep_for(std::chrono::milliseconds{200});
  caf::actor victim;
  for (auto& [label, handle] : j.replicas())
    if (label == "work[1]")
      victim = handle;
  REQUIRE(victim);
  caf::anon_send_exit(victim, caf::exit_reason::kill);
  auto r = j.wait_for(std::chrono::seconds{10});
  REQUIRE(r);
  CHECK_FALSE(r->ok);
  CHECK(r->error.find("stage work[1] went down") != std::string::npos);
  REQUIRE(all_actors_exit(sys));
}

TEST_CASE_METHOD(fixture,
                 "stop() ends the sources early and the pipeline drains",
                 "[stream]") {
  auto text = R"(
    stage { name: "src" type: "test_source"
            options { key: "items" value: "100000000" } }
    stage { name: "sink" type: "test_sink" input { stage: "src" }
            options { key: "sleep_us" value: "50" } blocking: true }
  )";
  auto loaded = load_topology_text(text, "t", reg);
  REQUIRE(loaded.ok());
  auto j = job::start(sys, *loaded.topology, reg);
  std::this_thread::sleep_for(std::chrono::milliseconds{300});
  j.stop();
  auto r = j.wait_for(std::chrono::seconds{10});
  REQUIRE(r);
  CHECK(r->ok);
  CHECK(r->stopped);
  auto& src = stats_of(*r, "src[0]");
  CHECK(src.items_out > 0);
  // Nothing is lost: whatever left the source reached the sink.
  CHECK(stats_of(*r, "sink[0]").items_in == src.items_out);
}
