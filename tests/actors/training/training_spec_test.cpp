// The training section's validation (actors/training/training_spec.hpp),
// with the field and line of every problem.
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
