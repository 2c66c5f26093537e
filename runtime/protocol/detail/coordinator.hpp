// The coordinator protocol (internal, not installed): every message a job's
// coordinator handles, who sends it, and what it means. The coordinator
// itself is in runtime/job/detail/coordinator.cpp (its state in coordinator_state.hpp).
//
//   job::start -> coordinator   (start_atom, handles, labels, stages,
//                               may_fail, services, service_labels)
//       once: every replica and service actor is spawned (a job_layout);
//       the coordinator monitors them
//   job::stop -> coordinator    (stop_atom)
//       drain the job (with checkpoints: end it at a cut)
//   job::abort -> coordinator   (abort_atom, reason)
//       kill every replica, fail the job
//   replica -> coordinator      (stats_atom, stage_stats)
//       every metrics interval
//   replica -> coordinator      (done_atom, stage_stats)
//       it ended normally; its last stats
//   replica -> coordinator      af::stream_error
//       it failed (or read bad input)
//   replica -> coordinator      (checkpoint_atom, id, label, state, step,
//                               ended)
//       its answer to the cut of checkpoint round `id` (runtime/protocol/stream.hpp)
//   PS client -> coordinator    (ps_watch_atom)
//       at the start: send me ps_gone_atom when a shard is lost
//   PS client -> coordinator    (ps_locate_atom, label)      -> caf::actor
//       the service actor to use now (waits while a lost one is restored)
//   shard -> coordinator        (ps_lost_atom, label, worker, pushes)
//       pushes of `worker` lost with the shard it replaced
//   coordinator -> itself       (progress_atom)
//       every job_options::progress_interval
//   coordinator -> itself       (checkpoint_tick_atom)
//       every checkpoint.every_seconds
//   coordinator -> itself       (checkpoint_timeout_atom, id)
//       round `id` took too long
//   coordinator -> itself       (restore_retry_atom, label)
//       try the lost service's hosts again
//   coordinator -> itself       (respawn_retry_atom, label)
//       try the lost replica's hosts again (runtime/job/detail/respawn.cpp)
//   coordinator -> itself       (join_poll_atom)
//       every second: a node of an elastic stage that answers gets a
//       new replica (runtime/job/detail/respawn.cpp)
//
// handles, services: std::vector<caf::actor>; labels, stages, may_fail,
// service_labels: std::vector<std::string>, side by side with the handles
// (may_fail: the names of stage_type::replicas_may_fail stages); id, step,
// pushes: uint64_t; worker: uint32_t; label, state, reason: std::string;
// ended: bool. The PS rows are runtime/protocol/ps.hpp's, seen from here.
// af::coordinator_actor (below) is this table as a type.
//
// What the coordinator sends is in runtime/protocol/stream.hpp (to replicas),
// runtime/protocol/service.hpp (to service actors), runtime/protocol/ps.hpp (ps_gone_atom to
// PS clients) and runtime/job/job.hpp (to a job_options::listener).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/atom.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actorflow/runtime/protocol/ps.hpp"
#include "actorflow/runtime/protocol/stage_stats.hpp"
#include "actorflow/runtime/protocol/stream.hpp"

namespace af {

using start_atom = caf::atom_constant<caf::atom("af_start")>;
using abort_atom = caf::atom_constant<caf::atom("af_abort")>;
using progress_atom = caf::atom_constant<caf::atom("af_progr")>;
using checkpoint_tick_atom = caf::atom_constant<caf::atom("af_ctick")>;
using checkpoint_timeout_atom = caf::atom_constant<caf::atom("af_ctime")>;
using restore_retry_atom = caf::atom_constant<caf::atom("af_rretry")>;
using respawn_retry_atom = caf::atom_constant<caf::atom("af_sretry")>;
using join_poll_atom = caf::atom_constant<caf::atom("af_jpoll")>;

/// The coordinator's interface (the table above). Down messages (every
/// replica and service actor, monitored) are CAF system messages, no part
/// of a typed interface in CAF 0.17: it takes them with set_down_handler.
/// PS clients are blocking actors and applications' listeners are
/// dynamically typed, so what it sends them goes without a type check
/// (caf::unsafe_send_as).
using coordinator_actor = caf::typed_actor<
  // job::start, job::stop, job::abort
  caf::reacts_to<start_atom, std::vector<caf::actor>, std::vector<std::string>,
                 std::vector<std::string>, std::vector<std::string>,
                 std::vector<caf::actor>, std::vector<std::string>>,
  caf::reacts_to<stop_atom>, caf::reacts_to<abort_atom, std::string>,
  // replicas
  caf::reacts_to<stats_atom, stage_stats>,
  caf::reacts_to<done_atom, stage_stats>, caf::reacts_to<stream_error>,
  caf::reacts_to<checkpoint_atom, uint64_t, std::string, std::string, uint64_t,
                 bool>,
  // the parameter server's clients and shards
  caf::reacts_to<ps_watch_atom>,
  caf::replies_to<ps_locate_atom, std::string>::with<caf::actor>,
  caf::reacts_to<ps_lost_atom, std::string, uint32_t, uint64_t>,
  // itself
  caf::reacts_to<progress_atom>, caf::reacts_to<checkpoint_tick_atom>,
  caf::reacts_to<checkpoint_timeout_atom, uint64_t>,
  caf::reacts_to<restore_retry_atom, std::string>,
  caf::reacts_to<respawn_retry_atom, std::string>,
  caf::reacts_to<join_poll_atom>>;

} // namespace af
