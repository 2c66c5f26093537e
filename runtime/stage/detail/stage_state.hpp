// Internal (not installed): the state of one stage replica actor, shared by
// the files that implement it.
//   runtime/stage/detail/stage_actor.cpp       the actor: the message handlers, the
//                                 main loop (pump), lost inputs
//   runtime/stage/detail/stage_wiring.cpp      its wiring, and the state a resumed
//                                 job's replica loads once wired
//   runtime/stage/detail/stage_checkpoint.cpp  its state at a checkpoint's cut, and
//                                 loading it again
//   runtime/stage/detail/stage_output.cpp      what the replica sends: items and markers
//                                 to its consumers, credit to its
//                                 producers, stats and errors to the
//                                 coordinator, and the loss of a consumer
//   runtime/stage/reorder_buffer.*      deterministic ordering of the inputs
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <stdexcept>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actorflow/runtime/protocol/detail/coordinator.hpp"
#include "actorflow/runtime/protocol/stage_stats.hpp"
#include "actorflow/runtime/stage/credit.hpp"
#include "actorflow/runtime/stage/reorder_buffer.hpp"
#include "actorflow/runtime/stage/stage.hpp"

namespace af::detail {

using clock_type = std::chrono::steady_clock;

struct output_event {
  enum kind_type { item, epoch_end, stream_end, barrier } kind;
  batch value;
  uint64_t epoch = 0; // the checkpoint id for a barrier
  // An item made from an input item that re-sends: that item waits for it
  // (one of pending_ack::waiting) until it is delivered (credit.hpp).
  pending_ack_ptr ack = nullptr;
};

/// Where a replica is in its life. It moves forward only: unwired ->
/// running -> finishing, and failed may follow any of them.
enum class replica_phase : uint8_t {
  /// Until the wiring comes, every message but restore_atom and wire_atom
  /// stays in the mailbox (runtime/protocol/stream.hpp).
  unwired,
  /// Wired: inputs, outputs and checkpoints flow.
  running,
  /// finish() ran and end_of_stream is queued behind the outputs; the
  /// replica exits once they are out and every consumer opened its edge.
  finishing,
  /// A stream_error was raised here or received: queues dropped, nothing
  /// more is processed.
  failed,
};

/// Whether the logic's produce() is still called: sources from the start,
/// other stages once their inputs ended (a cache replaying its epochs).
enum class production_phase : uint8_t {
  open,
  done,    // produce() returned false (a resumed replica that had ended)
  stopped, // a stop request ended it (stop_producing): no take-over
};

/// A checkpoint's state for this replica (restore_atom), kept until the
/// wiring comes and applied then.
struct pending_restore {
  std::string state;
  bool ended = false; // it had ended before the cut: end again at once
};

struct stage_state;

/// What the replica's logic gets as its emitter (stage_logic::process and
/// the others): its items and epochs go into the replica's output queue,
/// and it may ask for the inputs to stop or the metrics to go out. The
/// logic sees nothing else of the replica's state.
class replica_emitter final : public emitter {
public:
  explicit replica_emitter(stage_state& st) : st_(st) {}
  void push(batch item) override;
  void end_epoch(uint64_t epoch) override;
  void stop_inputs() override;
  void report_metrics() override;

private:
  stage_state& st_;
};

/// The replica's state. Its lifecycle is `phase`; the flags that remain
/// are facts of their own that may hold together: `source` (its role, from
/// the wiring), `produce_scheduled` (a produce_atom is in the mailbox),
/// `stop_requested` (the logic asked for its inputs to stop),
/// `waiting_for_credit` (how the time since the last message is counted),
/// `checkpoint_pending` and `paused` (a new checkpoint may be asked for
/// while the replica waits to resume from the last one's cut).
struct stage_state {
  stage_state() = default;
  stage_state(const stage_state&) = delete;
  stage_state& operator=(const stage_state&) = delete;

  stage_setup setup;
  coordinator_actor coordinator; // setup.coordinator, typed
  std::string label;
  replica_phase phase = replica_phase::unwired;
  bool wired() const noexcept { return phase != replica_phase::unwired; }
  bool failed() const noexcept { return phase == replica_phase::failed; }
  bool finishing() const noexcept {
    return phase == replica_phase::finishing;
  }
  replica_emitter emit{*this};
  inbound in;
  outbound out;
  std::deque<input_event> inputs;
  std::deque<output_event> outputs;
  bool source = false;
  bool produce_scheduled = false;
  production_phase production = production_phase::open;
  // Items from inputs with upstream_edge::resend whose outputs are still
  // queued: (the item, bytes), credited once the outputs left.
  std::vector<std::pair<pending_ack_ptr, uint64_t>> credit_after_output;
  // Items from such inputs that the logic still holds (stage_logic::held),
  // oldest first: credited as it lets them go (settle_held); their bytes
  // went back when they came.
  std::deque<pending_ack_ptr> credit_when_done;
  // Inputs on other nodes whose down message was held back until the data
  // plane delivered what their node sent before it (on_down).
  std::set<peer_id> drained;
  stage_stats stats;
  clock_type::time_point since = clock_type::now();
  bool waiting_for_credit = false;
  bool stop_requested = false;

  // What arrives goes through `order` into `inputs`: in deterministic mode
  // with several input edges in sequence order, else as it arrives.
  reorder_buffer order;

  // Checkpoints (runtime/protocol/stream.hpp). checkpoint_pending: checkpoint
  // checkpoint_id was asked for or met on an input and is not complete yet;
  // barrier_in: the inputs that delivered its barrier; paused: the cut is
  // taken, nothing is produced until resume_atom.
  bool checkpoint_pending = false;
  uint64_t checkpoint_id = 0;
  std::vector<bool> barrier_in;
  bool paused = false;
  // From restore_atom (a resumed job), applied when wired.
  std::optional<pending_restore> restore;
};

/// What a replica's handlers get as `self`.
using stage_self = stage_actor::stateful_pointer<stage_state>;

// runtime/stage/detail/stage_output.cpp

/// The replica's stats now, with the logic's metrics, and the histograms
/// and scalars it made since the last call (taken: they go out once).
stage_stats take_stats(stage_state& st);

/// Fails this replica: reports the error to the coordinator and the
/// consumers, drops what is queued, then exits with the cause as exit
/// reason. Does nothing once the replica failed.
void fail(stage_self self, const std::string& cause, bool bad_input = false);

/// Hands every consumer's envelope (items granted credit) to CAF.
void send_envelopes(stage_self self);

/// Moves queued outputs, in order, to consumers that have credit for them.
/// An item goes to the consumer with the most unused credit; markers go to
/// every consumer after everything queued before them. Fails the replica
/// when items are queued and no consumer is left.
void flush_outputs(stage_self self);

/// Sends the credit collected for input `e`, if any and `e` has not ended.
void send_credit(stage_self self, inbound::edge& e);

/// Input item `idx` (of an input that re-sends) was processed: what it
/// will wait for before it is acknowledged, its outputs queued now (pump()
/// takes an input only once every earlier output left) included.
pending_ack_ptr track_outputs(stage_state& st, size_t idx);

/// One hold on `ack` is gone (pending_ack::waiting). When none is left, it
/// and the items of its input before it that nothing holds are
/// acknowledged with the input's next credit message (send_credit).
void release_ack(stage_self self, const pending_ack_ptr& ack);

/// What to send a peer replica's messages to: its stand-in on the data
/// plane when it is on another node that the data plane reaches
/// (runtime/net/data_plane.hpp), else `peer` itself. Every message of one
/// direction of an edge goes this way, so they keep their order.
stage_actor via_data_plane(stage_self self, const stage_actor& peer);

/// Consumer `id` went down (or the coordinator says it was lost): its
/// credit is returned; what it had not credited back yet is lost with it,
/// or, on an edge that keeps it (downstream_edge::resend), what it had not
/// acknowledged goes out again to the other consumers first. Does nothing
/// for an unknown `id`.
void lose_output(stage_self self, peer_id id, const std::string& why,
                 bool abnormal);

// runtime/stage/detail/stage_wiring.cpp

/// wire_atom: adds every input and consumer of `w`, monitors them (and
/// their stand-ins on the data plane), opens the inputs, and loads a
/// resumed job's state kept by keep_restore(). False when the replica was
/// wired already (the wiring is dropped) or failed (a null peer, a state
/// that does not fit); else the stream may start.
bool wire(stage_self self, const wiring& w);

/// add_output_atom: a consumer respawned while the job runs joins the
/// outputs (monitored, like the wiring's); it takes items once its
/// open_atom comes. False when this replica ended its stream or failed.
bool add_output(stage_self self, const downstream_edge& d);

/// restore_atom: the state to load once wired (a resumed job's replica);
/// `ended`: it had ended at the checkpoint's cut.
void keep_restore(stage_self self, std::string& state, bool ended);

// runtime/stage/detail/stage_checkpoint.cpp

/// Loads a state that take_cut() sent (the runtime's epoch counters, then
/// the logic's restore()); throws std::invalid_argument when it does not
/// fit this replica.
void restore_stage(stage_state& st, const std::string& bytes);

/// Every input delivered the pending checkpoint's barrier or ended.
bool cut_reached(const stage_state& st);

/// Completes the pending checkpoint (cut_reached, inputs processed): the
/// logic quiesces, the state goes to the coordinator, the barrier is
/// queued behind the outputs, and the replica pauses until resume_atom.
void take_cut(stage_self self);

} // namespace af::detail
