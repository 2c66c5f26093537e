// The job's coordinator (internal, not installed): its state, and the
// functions its behaviour is made of, shared by
//   runtime/job/job.cpp              job::start: plans, spawns and wires a job
//   runtime/job/detail/coordinator.cpp      the behaviour: replicas ending, failing,
//                                progress, the end of the job
//   runtime/job/detail/checkpoint_round.cpp checkpoint rounds (docs/checkpoints.md)
//   runtime/job/detail/recovery.cpp         lost service actors and lost inputs
//                                (docs/multi-host.md)
//   runtime/job/detail/respawn.cpp          lost trainers started again
// The messages it handles are in runtime/protocol/detail/coordinator.hpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/atom.hpp>
#include <caf/behavior.hpp>
#include <caf/response_promise.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actorflow/runtime/job/job.hpp"
#include "actorflow/runtime/job/job_part.hpp"
#include "actorflow/runtime/net/tcp_meter.hpp"
#include "actorflow/runtime/protocol/detail/coordinator.hpp"
#include "actorflow/runtime/state/checkpoint.hpp"

namespace af::detail {

// How long restoring a lost service actor keeps trying its hosts (one
// round a second): long enough for a node restarted at the same address.
constexpr auto restore_patience = std::chrono::seconds{30};

using clock_type = std::chrono::steady_clock;

struct replica_entry {
  stage_actor handle;
  std::string label;
  std::string stage;
  bool may_fail = false; // stage_type::replicas_may_fail
  bool done = false;
  bool down = false;
  bool failed = false;
  bool cut = false; // takes part in checkpoints (not replayed on resume)
  std::string host;  // the node it runs on ("" in this process)
};

// What the coordinator needs to take checkpoints (topology.checkpoint).
struct checkpoint_settings {
  std::unique_ptr<checkpoint_store> store; // null: no checkpoints
  uint64_t every_steps = 0;
  double every_s = 0;
  bool at_end = true;
  std::set<std::string> replayed; // stage names outside the cut
  std::string topology;
  std::chrono::milliseconds timeout{120000};
  // Set when the job resumed.
  std::string resumed_from;
  uint64_t resumed_step = 0;
  // Steps of the replicas that had ended at the resumed cut (they do not
  // report them again).
  std::map<std::string, uint64_t> resumed_steps;
};

// One checkpoint being taken.
struct checkpoint_round {
  uint64_t id = 0;
  bool stop_after = false;       // Ctrl-C: end the job at this cut
  std::set<std::string> waiting; // replicas that have not answered
  std::map<std::string, std::string> states;
  std::vector<stage_actor> paused; // to resume once written
  job_part job;
  bool services_asked = false;
  size_t services_left = 0;
  std::map<std::string, std::string> service_states;
  clock_type::time_point began = clock_type::now();
};

// Where the service actors placed on nodes run, and what starting one
// again elsewhere takes: restoring a lost parameter-server shard while the
// job runs (docs/multi-host.md). Filled by job::start before the
// coordinator is told to start.
struct service_home {
  std::string service; // "ps"
  uint32_t index = 0;
  std::vector<std::string> hosts; // the service's placement
  size_t host = 0;                // where in `hosts` it runs now
};

// What the coordinator needs to know of the topology to handle lost
// machines: where the services run and how to start them again, and which
// stages hand a lost replica's input to another (stage_type::reassignable)
// and who consumes them.
struct job_plan {
  std::map<std::string, service_home> by_label; // remote services only
  std::map<std::string, std::string> addresses; // host name -> HOST:PORT
  std::string topology_text;
  std::chrono::milliseconds connect_timeout{10000};
  std::set<std::string> reassignable; // stage names (with >1 replica)
  // one_to_one and stage_type::resend_unfinished stages (trainers) with >1
  // replica: a lost replica's unfinished items go to the others
  // (downstream_edge::resend).
  std::set<std::string> resent;
  std::set<std::string> one_to_one; // those of `resent` that are one_to_one
  std::map<std::string, std::vector<std::string>> consumers; // stage ->
  std::map<std::string, std::vector<std::string>> producers; // stage ->
  // Stages of `resent` that are not one_to_one, have no consumers and run
  // on nodes (trainers): a replica lost with its node is started again
  // (runtime/job/detail/respawn.cpp). The topology says where and how they connect.
  std::set<std::string> respawned;
  // Those with max_replicas above replicas: stage -> max_replicas. A host
  // of theirs that answers while the job runs gets a new replica.
  std::map<std::string, uint32_t> elastic;
  std::shared_ptr<const topology::Topology> spec;
};

// A lost replica of a stage of job_plan::resent (its line in
// coordinator_state::tolerated): what became of what it had not finished,
// and of it. `incarnation`: how many replicas of that label were lost
// before it (the producers' closed edges to the label, in order).
struct loss_entry {
  size_t line = 0;
  std::string label;
  size_t incarnation = 0;
  // The producer replicas that had ended by then: what they had sent it
  // and it had not finished is lost (resent_note).
  std::vector<std::string> ended_producers;
  std::string respawn; // "; respawned on host 'w1' after 1.2 s", or why not
};

// A service actor restored while the job ran, and the pushes lost with the
// old one (its workers' ps_lost_atom reports, summed).
struct restored_entry {
  std::string label;
  std::string text; // "ps[1] on host 'w1' from the checkpoint at step 400"
  uint64_t lost = 0;
};

// Trying the hosts of a placement in rounds, one a second, for
// restore_patience: a lost service restored, a lost replica respawned.
struct host_rounds {
  std::string failures; // of the hosts tried in this round
  clock_type::time_point began = clock_type::now();
  bool retrying = false; // told the user it waits for a host
};

// A lost service actor being started again from the last checkpoint.
struct restore_attempt : host_rounds {
  std::string why;
  std::vector<caf::response_promise> waiting; // ps_locate_atom requests
};

// A lost replica being started again (runtime/job/detail/respawn.cpp); `began`:
// when it was lost.
struct respawn_attempt : host_rounds {};

// What the coordinator is told at start: every replica and the service
// actors, in spawn order.
struct job_layout {
  std::vector<caf::actor> handles;
  std::vector<std::string> labels;
  std::vector<std::string> stages;
  std::vector<std::string> may_fail; // stage names
  std::vector<caf::actor> services;
  std::vector<std::string> service_labels;
};

// The job's result, delivered exactly once: by the coordinator when the job
// ends, or when the coordinator itself is killed (system shutdown).
struct result_slot {
  std::mutex mtx;
  bool set = false;
  std::promise<run_result> promise;
  caf::actor listener; // job_options::listener

  void deliver(run_result r) {
    std::lock_guard<std::mutex> guard{mtx};
    if (set)
      return;
    set = true;
    if (listener)
      caf::anon_send(listener, job_done_atom::value, r);
    promise.set_value(std::move(r));
  }
};

// The coordinator's state, in parts owned by the file that uses them.

// Checkpoints (runtime/job/detail/checkpoint_round.cpp).
struct coordinator_checkpoints {
  std::shared_ptr<checkpoint_settings> checkpointing;
  std::optional<checkpoint_round> round;
  uint64_t next_checkpoint_id = 1;
  uint64_t last_checkpoint_step = 0;
  bool final_taken = false;
  // Ending at a checkpoint's cut (Ctrl-C with checkpoints): replicas and
  // services go down on purpose.
  bool halting = false;
  uint64_t checkpoints = 0;
  std::string last_checkpoint;
  // Why no more checkpoints are taken ("" while they are).
  std::string no_more_checkpoints;
  // The newest checkpoint written found every replica of the cut ended.
  bool last_ended_written = false;
};

// Lost service actors restored (runtime/job/detail/recovery.cpp).
struct coordinator_recovery {
  std::map<std::string, restore_attempt> restoring;
  std::vector<restored_entry> restored;
  // PS clients to tell when a shard is lost (ps_watch_atom).
  std::vector<caf::actor_addr> watchers;
};

// Lost replicas respawned and new ones joined
// (runtime/job/detail/respawn.cpp).
struct coordinator_respawns {
  // Lost replicas of resent stages, in order (resent_note, respawn notes).
  std::vector<loss_entry> losses;
  std::map<std::string, respawn_attempt> respawning;
  // Elastic stages (job_plan::elastic): the host being asked to take a new
  // replica, by stage; run_result::joined.
  std::map<std::string, std::string> joining;
  std::map<std::string, size_t> join_cursor; // the next free host to ask
  std::vector<std::string> joined;
  // The last stats of replicas that were respawned ("train[1] (lost)"):
  // their counts stay in the totals.
  std::vector<stage_stats> retired;
};

// The numbers of the run, for progress and the result
// (runtime/job/detail/coordinator.cpp).
struct coordinator_numbers {
  std::map<std::string, stage_stats> stats;
  // Histograms reported since the last progress snapshot.
  std::vector<histogram_summary> histograms;
  std::vector<scalar_event> scalars; // likewise
  // What crossed this process to and from the job's nodes (set when the
  // job has nodes): job_progress::coordinator_bytes.
  std::optional<tcp_meter> node_traffic;
};

struct coordinator_state {
  // The job and its actors.
  job_options opts;
  std::shared_ptr<result_slot> result;
  std::vector<replica_entry> replicas;
  std::vector<std::pair<std::string, service_actor>> services;
  // Restoring lost service actors, reassigning lost sources' input.
  std::shared_ptr<job_plan> plan;
  // The lifecycle (runtime/job/detail/coordinator.cpp).
  bool started = false;
  bool stopped = false;
  bool aborted = false; // job::abort
  std::string error;
  std::vector<std::string> tolerated;
  // The first replica or service lost with its node ("batch[0]
  // (exit_reason(remote_link_unreachable))"): run_result::lost.
  std::string lost_to_node;
  clock_type::time_point begin = clock_type::now();
  // The parts.
  coordinator_numbers numbers;
  coordinator_checkpoints ckpt;
  coordinator_recovery recovery;
  coordinator_respawns respawns;
};

/// What the coordinator's handlers get as `self`.
using coordinator_self = coordinator_actor::stateful_pointer<coordinator_state>;

// --- runtime/job/detail/coordinator.cpp ------------------------------------------------

// The coordinator of one job; job::start tells it start_atom once every
// actor is spawned. `result` is delivered when the job ends.
coordinator_actor::behavior_type
coordinator_main(coordinator_self self, job_options opts,
                 std::shared_ptr<result_slot> result,
                 std::shared_ptr<checkpoint_settings> checkpointing,
                 std::shared_ptr<job_plan> plan);

// The replica index in a label such as "train[1]".
uint32_t replica_of(const std::string& label);

// Sends `msg...` to every running replica of `stage`.
template <class... Ts>
void tell_stage(coordinator_self self, const std::string& stage,
                const Ts&... msg) {
  for (auto& r : self->state.replicas)
    if (r.stage == stage && !r.down)
      self->send(r.handle, msg...);
}

// The job fails with `message` (the first error wins): every replica is
// killed, a checkpoint being taken is abandoned.
void record_error(coordinator_self self, std::string message);

// Ends the job once every replica is down and no checkpoint is being
// taken: the services go, the result is delivered.
void maybe_complete(coordinator_self self);

// --- runtime/job/detail/checkpoint_round.cpp -------------------------------------------

// Whether checkpoints are still taken in this job.
bool checkpoints_on(const coordinator_state& st);

// Starts a checkpoint round (final: every replica of the cut ended;
// stop_after: the job ends at its cut).
void begin_round(coordinator_self self, bool final, bool stop_after);

// A replica answered checkpoint `id`.
void on_cut(coordinator_self self, uint64_t id, const std::string& label,
            std::string& state, uint64_t step, bool ended);

// A replica of the round ended (done) or went down before answering.
void round_lost(coordinator_self self, replica_entry& rep);

// Gives up on the round being taken; the job goes on.
void abandon_round(coordinator_self self, const std::string& why);

// Starts a round when one is due (by steps, by the timer, or at the end).
void maybe_checkpoint(coordinator_self self, bool timer);

// --- runtime/job/detail/recovery.cpp ---------------------------------------------------

// Attempt `attempt` of a round over `n` hosts for `label` (the failures
// of the round's hosts are in `r`): true when a host is left to try.
// Otherwise the round is over: once restore_patience has passed since
// r.began, `give_up` says why; else a new round is due in a second (the
// caller schedules it) and `give_up` stays empty.
bool host_left(host_rounds& r, const std::string& label, size_t attempt,
               size_t n, std::string& give_up);

// Starts service actor `label` again on host attempt n of its placement.
void try_restore(coordinator_self self, const std::string& label,
                 size_t attempt);

// Service actor `label` went down while the job runs: restore it from the
// last checkpoint, or fail the job.
void service_lost(coordinator_self self, const std::string& label,
                  const std::string& why);

// A lost replica's unfinished items go to the other replicas of its
// one_to_one stage; false when that is not possible.
bool resend_lost(coordinator_self self, replica_entry& lost,
                 const std::string& why);

// Replica `lost` of a stage in job_plan::resent is gone for good (lost or
// failed): its producers send what it had not finished to the other
// replicas, its consumers close its edge.
void hand_on_unfinished(coordinator_self self, const replica_entry& lost);

// "; N items it had not finished went to the other replicas", by the
// producers' counts (edge_stats::resent_items) on their edges to the lost
// replica (loss.incarnation: its closed edges to that label, in order),
// for the summary.
std::string resent_note(const coordinator_state& st, const loss_entry& loss);

// A lost replica's loss, as a line of `tolerated` already says it: kept for
// the summary's notes (losses).
void note_loss(coordinator_state& st, const std::string& label);

// --- runtime/job/detail/respawn.cpp ----------------------------------------------------

// Whether replica `lost` (just lost with its node, its items handed on) is
// started again: its stage is in job_plan::respawned and the job goes on.
bool respawnable(const coordinator_state& st, const replica_entry& lost);

// Starts a lost replica again: its own host first (a node restarted at the
// same address), then the next hosts of its stage, one round a second for
// restore_patience.
void respawn(coordinator_self self, const std::string& label);

// Tries host attempt n of the lost replica's stage.
void try_respawn(coordinator_self self, const std::string& label,
                 size_t attempt);

// Every second while the job runs (job_plan::elastic): asks one host of
// each elastic stage that runs no replica of it, and that may take one,
// whether a node answers there; if so, a new replica starts there and
// joins.
void poll_joiners(coordinator_self self);

// A surviving replica of a reassignable source takes over the lost one's
// input; false when that is not possible.
bool reassign(coordinator_self self, replica_entry& lost,
              const std::string& why);

} // namespace af::detail
