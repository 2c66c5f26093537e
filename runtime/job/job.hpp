// Running a validated topology: spawn every stage replica in an
// actor_system, wire the edges, and supervise the run with a coordinator
// actor until the stream ends, a stage fails, or the job is stopped.
//
// An embedding application (docs/embedding.md) can follow a job from one of
// its own actors instead of (or as well as) through callbacks:
//
//   job_options opts;
//   opts.listener = my_actor;          // progress and the end of the job
//   opts.outlets["out"] = my_actor;    // batches of the `outlet` stage "out"
//   auto j = af::job::start(sys, topo, reg, opts);
//
//   my_actor's behavior:
//     [](af::job_progress_atom, const af::job_progress& p) { ... },
//     [](af::job_done_atom, const af::run_result& r) { ... },
//     [](af::outlet_atom, const std::string& outlet, const af::batch& b) {
//       ...  // the reply (any, or none: void) grants the outlet credit
//     },
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/atom.hpp>
#include <caf/fwd.hpp>
#include <caf/meta/type_name.hpp>

#include "actorflow/runtime/protocol/job_events.hpp"
#include "actorflow/runtime/stage/registry.hpp"
#include "actorflow/runtime/topology/topology.hpp"

namespace af {

struct job_options {
  /// Called on the coordinator's thread every `progress_interval`; keep it
  /// short (it delays the coordinator). Must not throw.
  std::function<void(const job_progress&)> on_progress;
  /// Also every `progress_interval` (at least the topology's
  /// runtime.metrics_interval_s): the same snapshot to `listener` as
  /// (job_progress_atom, job_progress); and once, when the job has ended
  /// (also when it failed or its coordinator was killed), (job_done_atom,
  /// run_result) - after every outlet's last batch was answered. An
  /// invalid handle (default): nothing is sent. The job holds the handle
  /// until it ends; a listener that exits early only misses messages.
  caf::actor listener;
  std::chrono::milliseconds progress_interval{500};
  /// The actors the topology's `outlet` stages deliver to, by the outlet
  /// stage's name (actors/sinks/outlet.hpp). job::start throws naming the stage
  /// when an outlet stage has no actor here.
  std::map<std::string, caf::actor> outlets;
  /// How long connecting to a node (TCP, TLS and CAF's handshake) may take
  /// before the start fails: a peer that accepts and then says nothing
  /// (such as a TLS node and a coordinator without TLS) must not hang it.
  std::chrono::milliseconds connect_timeout{10000};
  /// Continue from the newest complete checkpoint in the topology's
  /// checkpoint.dir (docs/checkpoints.md); none there yet: start from the
  /// beginning (logged).
  bool resume = false;
  /// Continue from the checkpoint of exactly this step in checkpoint.dir
  /// (overrides `resume`): a job started again after a lost node resumes
  /// from its own newest checkpoint, never from a newer one another run
  /// left in the directory. job::start throws naming the path when that
  /// checkpoint is missing or incomplete.
  std::optional<uint64_t> resume_step;
  /// With checkpoints: a lost node ends the job as run_result::recoverable
  /// also where it would go on without what was lost (a trainer replica,
  /// the job going on with fewer trainers; a reader's share taken over by
  /// another replica, after which no checkpoint is taken), because whoever
  /// started it will start it again from its checkpoint, losing nothing.
  /// `actorflow run` sets it while --max-restarts are left. Decoders' items
  /// are still sent to the other replicas, and lost shards restored in
  /// place (neither loses anything).
  bool restart_on_loss = false;
  /// Give up on a checkpoint whose cut is not complete after this long
  /// (the stages then go on; the job does not fail).
  std::chrono::milliseconds checkpoint_timeout{120000};
};

/// A running job. Made by start() only; copies share the same job.
class job {
public:
  /// Spawns and wires the graph. Throws std::runtime_error naming the stage
  /// when a stage's factory fails, or naming the host when a node cannot be
  /// connected to, or naming the checkpoint when `opts.resume` finds one
  /// that does not fit the topology. Nodes are connected to through CAF's OpenSSL module when
  /// `sys` has loaded it (enable_network with tls_options), else through
  /// the plain middleman. Also throws std::runtime_error when the topology
  /// places stages on hosts and `sys` has no middleman (enable_network),
  /// or a host's address does not parse. `sys` and `reg` must outlive the
  /// job (until wait() has returned); `topo` and `opts` are copied.
  /// Blocks while it connects to nodes: call it outside actors of `sys`.
  static job start(caf::actor_system& sys, const loaded_topology& topo,
                   const registry& reg, job_options opts = {});

  /// Ends the sources early; everything in flight drains, then the job ends
  /// with result.stopped set. With checkpoints, a checkpoint is taken
  /// first and the job ends at its cut (nothing is trained after it, so
  /// --resume continues exactly there).
  void stop() const;
  /// Kills every stage at once; the job ends with `reason` as its error.
  /// stop() and abort() do not throw, and do nothing once the job ended.
  void abort(const std::string& reason) const;
  /// Blocks until the job ended; may be called again (the same result).
  /// Does not throw. Blocking: not from inside an actor of the job's system
  /// (use job_options::listener there).
  run_result wait();
  /// Waits at most `timeout`; nullopt if the job is still running.
  std::optional<run_result> wait_for(std::chrono::milliseconds timeout);

  /// The coordinator actor (it sends the listener's messages). References
  /// returned here are valid while this job object lives.
  const caf::actor& coordinator() const noexcept { return coordinator_; }
  /// Every stage replica as (label, handle), in topology order.
  const std::vector<std::pair<std::string, caf::actor>>&
  replicas() const noexcept {
    return replicas_;
  }

  /// The global step of the checkpoint the job resumed from, if it did.
  std::optional<uint64_t> resumed_step() const noexcept {
    return resumed_step_;
  }

private:
  caf::actor coordinator_;
  std::vector<std::pair<std::string, caf::actor>> replicas_;
  std::shared_future<run_result> result_;
  std::optional<uint64_t> resumed_step_;
};

} // namespace af
