// Autotune: choose replica counts and edge windows from a short measuring
// run instead of by hand.
//
// 1. The job runs as written for `seconds` (or to its end), then stops.
// 2. Each stage's CPU cost per item leaving the sources is its busy time
//    over the sources' items. One-to-one stages (parse, decode, transform)
//    get replicas in proportion to their share of that cost, out of the CPU
//    budget (at least 1, at most the budget); other stages keep theirs.
// 3. Each edge gets a window that lets it hold an equal share of the RAM
//    budget given its measured item size, between 2 and 64 items.
// Every change comes with a sentence saying why; nothing changes when the
// topology does not ask for autotune.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/fwd.hpp>

#include "actorflow/runtime/stage/registry.hpp"
#include "actorflow/runtime/topology/topology.hpp"

namespace af {

struct autotune_budget {
  size_t cpus = 0;        // 0: the number of cores
  uint64_t ram_bytes = 0; // 0: half of physical memory
  double seconds = 2.0;
};

/// The budget the topology's runtime block asks for, defaults filled in.
autotune_budget autotune_budget_of(const topology::Runtime& rt);

struct autotune_result {
  /// The topology with tuned replicas and windows.
  loaded_topology tuned;
  /// One sentence per decision, for the log and the final report.
  std::vector<std::string> decisions;
};

/// Measures `topo` in `sys` and returns the tuned topology. Throws
/// std::runtime_error if the measuring run fails.
autotune_result autotune(caf::actor_system& sys, const loaded_topology& topo,
                         const registry& reg, const autotune_budget& budget);

} // namespace af
