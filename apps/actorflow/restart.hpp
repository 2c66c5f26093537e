// `actorflow run` after a lost node: a job with checkpoints that failed
// as run_result::recoverable is started again from its newest checkpoint,
// placed on the hosts that answer (docs/multi-host.md, "Restarting after
// a lost node"). The functions below are the loop's steps; cmd_run.cpp
// runs them.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <caf/fwd.hpp>

#include "runtime/job.hpp"
#include "runtime/registry.hpp"
#include "runtime/topology.hpp"

namespace af::cli {

/// A job started again after a lost node (run_result::recoverable): what
/// the summary says of it, and the earlier attempts' lines.
struct restarts {
  int count = 0;
  std::chrono::steady_clock::time_point first_start =
    std::chrono::steady_clock::now();
  std::vector<std::string> lines;
  std::vector<std::string> tolerated;
  std::vector<std::string> restored;
  std::vector<std::string> joined;
};

/// The checkpoint a job that ended with `r` continues from, as (step,
/// path): the newest it wrote, else the one it resumed from; none
/// (nullopt): the beginning.
std::optional<std::pair<uint64_t, std::string>>
restart_point(const run_result& r);

/// `original` placed on the hosts that answer now (every host of it, once
/// a lost node is back); waits while some stage has no host left, 30 s at
/// most. nullopt, with why in `why`, when time ran out or a signal came.
std::optional<loaded_topology> placement_now(caf::actor_system& sys,
                                             const loaded_topology& original,
                                             std::string& why);

/// After a job that ended with `res`: the topology to start it again with
/// (and `jopts` set to resume from its checkpoint), or nullopt when it is
/// not to be started again (it did not fail for a lost node, it was
/// `interrupted` (set when a signal comes meanwhile), `max_restarts` were
/// used up, or no placement was found: `res.error` then says why). Adds
/// the summary's line to `r`.
std::optional<loaded_topology>
restart_after(caf::actor_system& sys, const registry& reg,
              const loaded_topology& original, const loaded_topology& last,
              int max_restarts, run_result& res, bool& interrupted,
              job_options& jopts, restarts& r);

/// job::start with `placed`. While the job is being started again after a
/// lost node (`restarting`), a start that fails (another host went away
/// meanwhile) is placed again and retried for 30 s. nullopt: it did not
/// start; `why` says why.
std::optional<job> start_placed(caf::actor_system& sys, const registry& reg,
                                const loaded_topology& original,
                                loaded_topology& placed,
                                const job_options& jopts, bool restarting,
                                std::string& why);

/// The last start's result with what the earlier ones had: their
/// tolerated and restored lines, the restarts, the whole run's time.
void add_restarts(run_result& res, const restarts& r);

} // namespace af::cli
