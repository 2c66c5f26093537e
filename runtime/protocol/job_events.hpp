// What a job tells whoever follows it (job_options::listener, on_progress,
// job::wait): the progress of the run and how it ended. Messages as well as
// return values, so that they can reach a listener on another node
// (runtime/net/system.cpp registers them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>

#include "actorflow/runtime/protocol/stage_stats.hpp"

namespace af {
/// What the coordinator knows at a moment of the run.
struct job_progress {
  double elapsed_s = 0;
  /// Totals over the replicas of sink stages (what reached the end).
  uint64_t items = 0;
  uint64_t records = 0;
  uint64_t bytes = 0;
  /// Latest report of every replica that has reported.
  std::vector<stage_stats> stages;
  /// Histograms reported since the previous snapshot (a trainer's weights
  /// and gradients), oldest first; each snapshot hands them out once.
  std::vector<histogram_summary> histograms;
  /// Step-stamped values (stage_logic::take_scalars) reported since the
  /// previous snapshot, oldest first, named "<stage>/<name>"
  /// ("evaluate/test_loss"); each snapshot hands them out once.
  std::vector<scalar_event> scalars;
  /// Bytes the coordinator's process sent to and received from the job's
  /// nodes over TCP so far, as the kernel counts them (control messages,
  /// data of the stages that run in it, and with CAF 0.17 all data
  /// between two other nodes, which it relays: docs/multi-host.md, "Bytes
  /// through the coordinator"); 0 when the job places nothing on nodes.
  uint64_t coordinator_bytes = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_progress& x) {
  return f(caf::meta::type_name("af::job_progress"), x.elapsed_s, x.items,
           x.records, x.bytes, x.stages, x.histograms, x.scalars,
           x.coordinator_bytes);
}

/// Messages to job_options::listener and job_options::outlets (see the top
/// of this file). They are sent within one process (the coordinator's); the
/// payloads are shared, not copied.
///   (job_progress_atom, job_progress)   every progress_interval
///   (job_done_atom, run_result)         once, when the job has ended
///   (outlet_atom, std::string outlet, batch)  a request per batch
using job_progress_atom = caf::atom_constant<caf::atom("af_jprog")>;
using job_done_atom = caf::atom_constant<caf::atom("af_jdone")>;
using outlet_atom = caf::atom_constant<caf::atom("af_outlet")>;

struct run_result {
  bool ok = false;
  /// The job was stopped early (stop()) and drained.
  bool stopped = false;
  /// One line: which stage failed and why. Empty when ok.
  std::string error;
  /// Replicas that failed while the job went on (stages whose type allows
  /// it, such as trainers): "label: cause" each.
  std::vector<std::string> tolerated_failures;
  /// Service actors (parameter-server shards) lost while the job ran and
  /// restored from the last checkpoint on another node: one line each,
  /// "ps[1] on host 'w1' from the checkpoint at step 400: 123 steps lost".
  std::vector<std::string> restored;
  /// Replicas that joined the running job on a node started after it
  /// began (Stage.max_replicas): "train[1] on host 'w4' 2.1 s after the
  /// start" each.
  std::vector<std::string> joined;
  job_progress final;
  /// The checkpoint the job resumed from ("" if none) and its step.
  std::string resumed_from;
  uint64_t resumed_step = 0;
  /// Checkpoints written during the run, and the newest one's directory
  /// and step.
  uint64_t checkpoints = 0;
  std::string last_checkpoint;
  uint64_t last_checkpoint_step = 0;
  /// The job failed while a node was lost (a replica or service actor went
  /// down with remote_link_unreachable: its process died, froze, or its
  /// link was cut), and the topology takes checkpoints: starting it again
  /// from the newest checkpoint of this run (last_checkpoint, else the one
  /// it resumed from, else the beginning) with the lost node's replicas
  /// placed on other hosts continues it. `actorflow run` does that
  /// (docs/multi-host.md, "Restarting after a lost node").
  bool recoverable = false;
  /// The first replica or shard lost with its node, and why: "batch[0]
  /// (exit_reason(remote_link_unreachable))". Empty when none was.
  std::string lost;
  /// Filled by whoever started the job again after such a loss (`actorflow
  /// run`), not by the job: a line per restart ("after losing batch[0] ...
  /// : from the checkpoint at step 1200; batch[0] from host 'w2' to
  /// 'w3'"), and the seconds from the first start to this end (`final`
  /// covers the last start only).
  std::vector<std::string> restarts;
  double run_elapsed_s = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, run_result& x) {
  return f(caf::meta::type_name("af::run_result"), x.ok, x.stopped, x.error,
           x.tolerated_failures, x.restored, x.joined, x.final,
           x.resumed_from,
           x.resumed_step, x.checkpoints, x.last_checkpoint,
           x.last_checkpoint_step, x.recoverable, x.lost, x.restarts,
           x.run_elapsed_s);
}

} // namespace af
