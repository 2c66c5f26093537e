// Test harness: an actor system configured like the binary's, the built-in
// stage types plus a few test-only ones, and a helper that loads a topology
// from text and runs it to the end with a time limit.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "actorflow/runtime/job/job.hpp"
#include "actorflow/runtime/stage/registry.hpp"
#include "actorflow/runtime/topology/topology.hpp"

namespace af::test {

/// What test stages observed, shared between the test and its stages.
struct observations {
  std::mutex mtx;
  /// label -> values of tensor "label" seen by that replica, in order.
  std::vector<std::pair<std::string, int64_t>> labels;
  /// Payload addresses of tensor "x" (produced by a source or seen by a sink).
  std::vector<const void*> produced;
  std::vector<const void*> consumed;
  std::atomic<uint64_t> items{0};
  /// Every item "collect" sinks received, in arrival order.
  std::vector<batch> collected;
};

/// `network`: with CAF's middleman loaded (runtime/net/system.hpp's
/// enable_network), so that the system has a node id of its own, as a
/// node has (without it every process's is "invalid-node").
struct config : caf::actor_system_config {
  explicit config(size_t threads = 2, const char* policy = "sharing",
                  bool network = false);
};

/// Built-in types plus:
///  - "test_source" (source): options items (default 1000), item_bytes
///    (64), max_item_bytes (if set, sizes vary between item_bytes and it),
///    work_ns (per item). Tensor "x" u8 [1, size], "label" i64 [1] = index.
///  - "test_sink" (sink): options work_ns, work_ns_r<k> (replica k only),
///    sleep_us, sleep_us_r<k>, fail_at (throw at that item index),
///    record (1: keep labels and payload addresses in `obs`).
///  - "test_map" (transform): forwards items; fail_at as above.
///  - "collect" (sink): keeps every item in `obs->collected`.
registry make_registry(std::shared_ptr<observations> obs);

/// A custom stage's integer option `key` (Stage.options), or `fallback`;
/// throws std::invalid_argument naming the option when it is not a whole
/// number.
int64_t option(const topology::Stage& s, const std::string& key,
               int64_t fallback);

/// An actor system with the test registry: what most stream tests need.
struct fixture {
  explicit fixture(bool network = false) : cfg(2, "sharing", network) {}
  std::shared_ptr<observations> obs = std::make_shared<observations>();
  registry reg = make_registry(obs);
  config cfg;
  caf::actor_system sys{cfg};
};

/// Whether every actor of `sys` exits within 10 s.
bool all_actors_exit(caf::actor_system& sys);

/// Loads `text` (must be valid: REQUIREs it) and runs it. Fails the test if
/// the job does not end within `limit`.
run_result run_text(caf::actor_system& sys, const registry& reg,
                    const std::string& text,
                    std::chrono::seconds limit = std::chrono::seconds{60},
                    job_options opts = {});

/// The stats of replica `label` ("sink[0]") in `r`; REQUIREs that it exists.
const stage_stats& stats_of(const run_result& r, const std::string& label);

/// Metric `name` of replica `label` in `r`; FAILs the test if it has none.
double metric_of(const run_result& r, const std::string& label,
                 const std::string& name);

/// Collects what a stage pushes, for tests that drive a stage_logic
/// directly.
struct collecting_emitter : emitter {
  std::vector<batch> items;
  std::vector<uint64_t> epochs_ended;
  void push(batch b) override { items.push_back(std::move(b)); }
  void end_epoch(uint64_t e) override { epochs_ended.push_back(e); }
};

/// A stage's batches run whole, and run with a checkpoint between: `items`
/// through one replica of `stage` (made by its type in `reg`) to its
/// finish; and the first `split` of them through a second replica, whose
/// snapshot a third restores before it takes the rest and finishes.
struct resumed_batches {
  std::vector<batch> whole;
  std::vector<batch> joined; // the second's batches, then the third's
  std::shared_ptr<stage_logic> resumed; // the third, for more checks
};
resumed_batches resume_between(const registry& reg,
                               const topology::Stage& stage,
                               const std::vector<batch>& items, size_t split);

/// Resident set size of this process in bytes.
uint64_t rss_bytes();

} // namespace af::test
