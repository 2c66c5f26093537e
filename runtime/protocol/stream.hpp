// The stream protocol: every message that travels on an edge or between a
// stage and its coordinator. docs/stream-protocol.md is the specification;
// this header is its vocabulary.
//
//   consumer -> producer   (open_atom, window, byte_budget)   initial credit
//   consumer -> producer   (demand_atom, items, bytes, acked) credit returned
//   producer -> consumer   std::vector<af::batch>             1..n items
//   producer -> consumer   (end_of_epoch_atom, epoch)         after the epoch
//   producer -> consumer   (end_of_stream_atom)               nothing follows
//   any      -> consumer   af::stream_error                   failure report
//   coordinator -> stage   (wire_atom, af::wiring)            edges to use
//   coordinator -> source  (stop_atom)                        end early
//   stage -> coordinator   (stats_atom, af::stage_stats)      periodic
//   stage -> coordinator   (done_atom, af::stage_stats)       before exiting
//
// Checkpoints (docs/checkpoints.md):
//   coordinator -> stage   (checkpoint_atom, id)              cut the stream
//   producer -> consumer   (barrier_atom, id)                 after the items
//                                                             before the cut
//   stage -> coordinator   (checkpoint_atom, id, label, state, step, ended)
//   coordinator -> stage   (resume_atom, id)                  go on
//   job -> stage           (restore_atom, state, ended)       before wire_atom
//
// Lost machines (docs/multi-host.md):
//   coordinator -> source  (takeover_atom, replica, from_epoch)
//   coordinator -> stage   (input_lost_atom, producer label)
//   coordinator -> stage   (output_lost_atom, consumer label)
//   coordinator -> producer (add_output_atom, af::downstream_edge) -> bool
//       a replica respawned for a lost one: a new consumer (false: this
//       producer has ended its stream, or failed)
//
// A replica to itself:
//   (produce_atom)      a source that yielded after a burst goes on
//   (tick_atom)         every metrics interval: send stats_atom
//
// window, byte_budget, items, bytes, epoch, id, step, from_epoch: uint64_t;
// replica: uint32_t; label, state: std::string; ended: bool.
// af::stage_actor (below) is this table as a type: a replica handles every
// row and nothing else, and what a replica or the coordinator sends a
// replica is checked against it when it compiles. The coordinator's own
// rows are af::coordinator_actor (runtime/protocol/detail/coordinator.hpp).
//
// A stage that was asked for checkpoint `id`, or met barrier `id` on an
// input, completes it once every input edge delivered that barrier or its
// end of stream and every item queued before is processed: it finishes the
// work of those items (stage_logic::quiesce), sends its state to the
// coordinator, queues the barrier behind its outputs and then pauses (no
// produce() calls) until resume_atom. Sources complete it at once. So the
// states the coordinator collects are one consistent cut: every record
// read before it is in exactly one stage's state or already trained on,
// and nothing read after it is anywhere. A stage that has already ended
// answers at once with `ended` set.
//
// Items that are ready at the same moment for the same consumer travel in
// one message (one CAF message costs about as much as a whole pass-through
// stage's work on an item); credit still counts items, not messages. A
// consumer also accepts a lone af::batch.
//
// Invariants (checked by tests/runtime):
//   - a producer never has more than `window` items, nor (when a budget is
//     set) more than `byte_budget` payload bytes, unacknowledged on an edge;
//     an item larger than the whole budget is sent only when nothing else is
//     in flight on that edge, so it cannot deadlock;
//   - markers and items on one edge arrive in the order sent (CAF keeps
//     per-sender FIFO order), so end_of_stream follows the last item;
//   - a consumer forwards end_of_epoch(e) once every live input reached e,
//     and end_of_stream once every input ended and its work is drained.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actorflow/runtime/core/batch.hpp"
#include "actorflow/runtime/protocol/service.hpp" // replica_lost_atom

namespace af {

using open_atom = caf::atom_constant<caf::atom("af_open")>;
using demand_atom = caf::atom_constant<caf::atom("af_demand")>;
using end_of_epoch_atom = caf::atom_constant<caf::atom("af_eoe")>;
using end_of_stream_atom = caf::atom_constant<caf::atom("af_eos")>;
using wire_atom = caf::atom_constant<caf::atom("af_wire")>;
using stop_atom = caf::atom_constant<caf::atom("af_stop")>;
using stats_atom = caf::atom_constant<caf::atom("af_stats")>;
using done_atom = caf::atom_constant<caf::atom("af_done")>;
using checkpoint_atom = caf::atom_constant<caf::atom("af_ckpt")>;
using barrier_atom = caf::atom_constant<caf::atom("af_barr")>;
using resume_atom = caf::atom_constant<caf::atom("af_resume")>;
using restore_atom = caf::atom_constant<caf::atom("af_restor")>;
/// coordinator -> surviving source replica: (takeover_atom, replica,
/// from_epoch), stage_logic::take_over.
using takeover_atom = caf::atom_constant<caf::atom("af_takeov")>;
/// coordinator -> consumer replicas: (input_lost_atom, producer label), a
/// lost replica of a reassignable stage: its edge is closed as if it had
/// ended (a consumer on a third node may not see it go down itself).
using input_lost_atom = caf::atom_constant<caf::atom("af_inlost")>;
/// coordinator -> producer replicas: (output_lost_atom, consumer label), a
/// lost replica of a one_to_one stage with several replicas: what was sent
/// to it and not acknowledged goes to the other replicas.
using output_lost_atom = caf::atom_constant<caf::atom("af_outlost")>;
/// coordinator -> producer replicas: (add_output_atom, downstream_edge), a
/// consumer respawned while the job runs; the answer says whether it was
/// added (not once the producer's stream ended).
using add_output_atom = caf::atom_constant<caf::atom("af_addout")>;
/// A replica to itself: a source that yielded after a burst of items.
using produce_atom = caf::atom_constant<caf::atom("af_prod")>;
/// A replica to itself, every metrics interval.
using tick_atom = caf::atom_constant<caf::atom("af_tick")>;

/// A failure report. `stage` is the stage replica where it began ("decode[1]")
/// and stays unchanged while the report travels downstream.
struct stream_error {
  std::string stage;
  std::string cause;
  /// The data was bad (af::input_error): no failure policy tolerates it.
  bool bad_input = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stream_error& x) {
  return f(caf::meta::type_name("af::stream_error"), x.stage, x.cause,
           x.bad_input);
}

/// One input edge of a stage replica, as the coordinator wires it.
// The peers travel untyped, as the job holds every replica (spawn_stage's
// and the node spawners' answers); a replica casts them to af::stage_actor
// when it is wired.
struct upstream_edge {
  caf::actor peer;
  std::string name;         // producer replica, e.g. "reader[0]"
  uint64_t window = 8;      // items in flight, >= 1
  uint64_t byte_budget = 0; // payload bytes in flight, 0 = unlimited
  // The producer's stage is stage_type::reassignable (and has several
  // replicas), or one_to_one with several: losing this producer closes
  // the edge instead of failing.
  bool replaceable = false;
  // The producer keeps what it sent until we acknowledge it
  // (downstream_edge::resend): credit for an item goes back once the
  // outputs made from it have left, and it is acknowledged once those that
  // went to consumers on other nodes arrived there, so that nothing is
  // lost with us (runtime/stage/credit.hpp, pending_ack).
  bool resend = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, upstream_edge& x) {
  return f(caf::meta::type_name("af::upstream_edge"), x.peer, x.name, x.window,
           x.byte_budget, x.replaceable, x.resend);
}

struct downstream_edge {
  caf::actor peer;
  std::string name;
  // The consumer's stage is one_to_one with several replicas: keep what
  // was sent to it until it acknowledges it (demand_atom's `acked`), and if
  // it is lost, send that to another replica (at-least-once).
  bool resend = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, downstream_edge& x) {
  return f(caf::meta::type_name("af::downstream_edge"), x.peer, x.name,
           x.resend);
}

/// Everything a stage replica needs to know about its edges.
struct wiring {
  std::vector<upstream_edge> upstreams;
  std::vector<downstream_edge> downstreams;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wiring& x) {
  return f(caf::meta::type_name("af::wiring"), x.upstreams, x.downstreams);
}

/// A stage replica's interface: every row of the table above that names a
/// stage, a consumer, a producer or a source as receiver. Two things of the
/// protocol are not in it, because CAF 0.17's typed actors cannot express
/// them: down messages (its peers and its coordinator, monitored) are
/// system messages that a replica takes with set_down_handler, and a
/// replica keeps every message but restore_atom and wire_atom in its
/// mailbox until it is wired; its handlers return caf::skip for that (a
/// typed behavior must handle each row in every state).
using stage_actor = caf::typed_actor<
  // producer -> consumer
  caf::reacts_to<std::vector<batch>>, caf::reacts_to<batch>,
  caf::reacts_to<end_of_epoch_atom, uint64_t>,
  caf::reacts_to<end_of_stream_atom>, caf::reacts_to<barrier_atom, uint64_t>,
  caf::reacts_to<stream_error>,
  // consumer -> producer
  caf::reacts_to<open_atom, uint64_t, uint64_t>,
  caf::reacts_to<demand_atom, uint64_t, uint64_t, uint64_t>,
  // consumer -> producer, and coordinator -> stage
  caf::reacts_to<stop_atom>,
  // job and coordinator -> stage
  caf::reacts_to<restore_atom, std::string, bool>,
  caf::reacts_to<wire_atom, wiring>, caf::reacts_to<checkpoint_atom, uint64_t>,
  caf::reacts_to<resume_atom, uint64_t>,
  caf::reacts_to<takeover_atom, uint32_t, uint64_t>,
  caf::reacts_to<input_lost_atom, std::string>,
  caf::reacts_to<output_lost_atom, std::string>,
  caf::replies_to<add_output_atom, downstream_edge>::with<bool>,
  // itself
  caf::reacts_to<produce_atom>, caf::reacts_to<tick_atom>>;

} // namespace af
