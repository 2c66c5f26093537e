// A job run to its end under supervision, as `actorflow run` runs it, for
// any application (the CLI only parses flags and prints):
//
// - autotune first when the topology asks for it (runtime.autotune);
// - interrupts: the first stops the job (drains it, or ends it at a
//   checkpoint's cut when the topology takes checkpoints), a later one at
//   least 0.5 s after it aborts it;
// - a lost node (run_result::recoverable, with checkpoints): the job is
//   started again from its newest checkpoint, placed on the hosts that
//   answer now (runtime/job/relocate.hpp), at most `max_restarts` times
//   (docs/multi-host.md, "Restarting after a lost node"); the result holds
//   every start's lines.
//
//   af::supervise_options o;
//   o.interrupts = [] { return my_signal_count.load(); };
//   o.prepare = [&](const af::loaded_topology& t, af::job_options& j) {
//     j.on_progress = ...;   // the topology as it will run (tuned)
//   };
//   auto run = af::supervise(sys, topo, reg, std::move(o));
//   // run.result: the summary's run_result
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <caf/fwd.hpp>

#include "actorflow/runtime/job/job.hpp"
#include "actorflow/runtime/stage/registry.hpp"
#include "actorflow/runtime/topology/topology.hpp"

namespace af {

struct supervise_options {
  /// For every start (restarts set resume_step themselves; resume applies
  /// to the first start).
  job_options job;
  /// Starts after a lost node; 0: none. Only topologies with checkpoints
  /// are started again.
  int max_restarts = 10;
  /// How many interrupts were asked for so far (a count that only grows,
  /// such as the CLI's count of SIGINT and SIGTERM). Empty: none ever.
  std::function<int()> interrupts;
  /// Once, after autotune and before the first start: the topology as it
  /// will run, and the job options to adjust (progress callbacks that need
  /// the tuned topology). Throwing fails the run with that message.
  std::function<void(const loaded_topology&, job_options&)> prepare;
  /// After each start, before the wait: the job, and how many restarts
  /// came before it (0: the first start). Throwing aborts the job and
  /// fails the run with that message.
  std::function<void(af::job&, int restarts)> started;
  /// When the first interrupt stops the job, before the warning is logged
  /// (a terminal's progress line to clear).
  std::function<void()> stopping;
  /// When a later interrupt aborts the job: the coordinator reports the
  /// end at once, so a process may bound its shutdown from here
  /// (runtime/job/shutdown.hpp).
  std::function<void()> aborted;
  /// What the first interrupt logs after "interrupted: draining the
  /// pipeline" (or "taking a checkpoint, then stopping"), in parentheses;
  /// empty: it logs nothing (an application that stops its job on
  /// purpose, as the Python iterator does).
  std::string stop_hint = "press Ctrl-C again to abort";
  /// The reason a later interrupt aborts the job with (run_result::error).
  std::string abort_reason = "aborted by a second interrupt";
};

struct supervised_run {
  /// The last start's result, with the earlier starts' tolerated failures,
  /// restored and joined lines, the restarts (run_result::restarts) and
  /// the whole run's time. When the job never started, ok is false and
  /// error says why.
  run_result result;
  /// False when autotune, `prepare` or the first start failed (result.error
  /// says why); the job did not run.
  bool started = false;
  /// An interrupt stopped or aborted the job (or came while it was being
  /// placed again).
  bool interrupted = false;
  /// Autotune's decisions, a sentence each (empty without autotune).
  std::vector<std::string> autotune;
};

/// Runs `topo` to its end as described at the top of this file; blocks
/// until then. `reg` and `sys` must outlive the call. Does not throw
/// (failures are in the result) except std::bad_alloc.
supervised_run supervise(caf::actor_system& sys, const loaded_topology& topo,
                         const registry& reg, supervise_options opts);

} // namespace af
