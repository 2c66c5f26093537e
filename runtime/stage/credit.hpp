// Credit bookkeeping for the two ends of stream edges, free of any actor
// code so that it can be tested and reasoned about on its own.
//
// outbound: a producer replica's edges to its consumer replicas. It knows
//   what each consumer granted (window, byte budget), what is in flight, and
//   picks the consumer with the most unused credit for the next item.
// inbound: a consumer replica's edges from its producer replicas. It counts
//   what arrived, decides when to hand credit back (in half-window chunks, to
//   cut the message count), and tracks end-of-epoch and end-of-stream per
//   input.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_cast.hpp>
#include <caf/actor_control_block.hpp>

#include "actorflow/runtime/core/batch.hpp"
#include "actorflow/runtime/protocol/stage_stats.hpp"
#include "actorflow/runtime/protocol/stream.hpp"

namespace af {

/// Identity of a peer, comparable with what current_sender() returns.
using peer_id = const caf::actor_control_block*;

template <class Handle>
peer_id id_of(const Handle& h) {
  return caf::actor_cast<caf::actor_control_block*>(h);
}

/// An item from an input that re-sends (upstream_edge::resend), from the
/// time it is processed until its producer may forget it. It waits for its
/// own credit (the outputs made from it have left, or the logic no longer
/// holds it) and for each output made from it that went to a consumer on
/// another node, until that consumer credits it back: such an output can
/// still die with this node on its way, after the credit for the item it
/// came from reached the producer (issue: a lost decoder lost an item).
/// An output to a consumer that re-sends too (a chain of one-to-one stages)
/// waits for that consumer's acknowledgement instead, so that the chain
/// holds end to end; any other output to a consumer on this node counts as
/// delivered once sent.
struct pending_ack {
  size_t edge = 0;      // the input, an index in inbound::edges()
  uint32_t waiting = 1; // the item's credit, plus outputs on their way
};
using pending_ack_ptr = std::shared_ptr<pending_ack>;

/// Credit handed back on an edge: `items` consumed items of `bytes` payload
/// bytes; `acked` of the oldest items on an edge that re-sends are
/// acknowledged (the producer may forget them).
struct credit_grant {
  uint64_t items = 0;
  uint64_t bytes = 0;
  uint64_t acked = 0;
};

class outbound {
public:
  struct edge {
    stage_actor peer;
    peer_id id = nullptr;
    bool open = false; // the consumer granted its initial credit
    uint64_t in_flight_items = 0;
    uint64_t in_flight_bytes = 0;
    /// Items granted credit and counted in flight, not yet handed to CAF:
    /// they leave as one message at the end of the current step.
    std::vector<batch> envelope;
    edge_stats stats;
    /// downstream_edge::resend: what was sent and not yet acknowledged
    /// (credit_grant::acked), oldest first.
    bool keep = false;
    std::deque<batch> unacked;
    /// The input item each output was made from (or null), oldest first,
    /// while it is not delivered: on an edge that keeps, one per `unacked`
    /// item, released as the consumer acknowledges; else, to a consumer on
    /// another node (stats.remote), one per item in flight, released as
    /// the consumer credits them back.
    std::deque<pending_ack_ptr> acks;

    uint64_t unused_items() const noexcept {
      return in_flight_items >= stats.window ? 0
                                             : stats.window - in_flight_items;
    }
    /// Whether an item of `bytes` may be sent now without breaking the
    /// window or the byte budget.
    bool can_take(uint64_t bytes) const noexcept;
  };

  void add(stage_actor peer, std::string name);
  /// The consumer's initial grant. False if `id` is not one of our edges.
  bool open(peer_id id, uint64_t window, uint64_t byte_budget);
  /// Credit handed back. False if `id` is not one of our edges. The input
  /// items whose outputs were in flight to it are added to `released`, one
  /// entry per output: the caller releases each (one of its `waiting`).
  bool credit(peer_id id, const credit_grant& grant,
              std::vector<pending_ack_ptr>& released);
  /// The edge that should take an item of `bytes` next, or nullptr when no
  /// consumer has credit for it: the one with the most unused item credit.
  edge* pick(uint64_t bytes) noexcept;
  void sent(edge& e, uint64_t bytes) noexcept;
  /// Removes a consumer that went down; returns the items it had in flight
  /// (lost with it). Returns 0 for an unknown peer. An edge that keeps what
  /// it sent moves those items to `resend` instead (not counted as lost).
  /// Its `acks` go to `acks` when that is given (on an edge that keeps,
  /// one per item of `resend`).
  uint64_t remove(peer_id id, std::vector<batch>* resend = nullptr,
                  std::vector<pending_ack_ptr>* acks = nullptr);

  bool empty() const noexcept { return edges_.empty(); }
  const std::vector<edge>& edges() const noexcept { return edges_; }
  std::vector<edge>& edges() noexcept { return edges_; }
  std::vector<edge_stats> stats() const;

private:
  edge* find(peer_id id) noexcept;

  std::vector<edge> edges_;
  std::vector<edge_stats> removed_;
};

class inbound {
public:
  struct edge {
    stage_actor peer;
    peer_id id = nullptr;
    std::string name;
    uint64_t window = 0;
    uint64_t byte_budget = 0;
    uint64_t held_items = 0; // arrived, not yet credited back
    uint64_t done_items = 0; // consumed, credit not yet sent
    uint64_t done_bytes = 0;
    uint64_t epochs_ended = 0;
    // 1 + the epoch of the last item handled from it (0: none yet).
    uint64_t epochs_seen = 0;
    bool eos_received = false; // end_of_stream is in our input queue
    bool ended = false;        // ... and has been handled
    bool replaceable = false;  // upstream_edge::replaceable
    bool resend = false;       // upstream_edge::resend
    // Its producer was lost and its share went to another replica: ended,
    // and it says nothing about epochs any more.
    bool lost = false;
    // resend: the items processed and not yet acknowledged, oldest first,
    // and how many were acknowledged since the last credit message.
    std::deque<pending_ack_ptr> pending;
    uint64_t acked = 0;
  };

  void add(stage_actor peer, std::string name, uint64_t window,
           uint64_t byte_budget);
  edge* find(peer_id id) noexcept;
  void received(edge& e) noexcept { ++e.held_items; }
  /// An item from `e` has been consumed. Returns true when the credit
  /// collected for `e` should be sent now (half of the window, or
  /// `idle` is true so that nothing stays unreturned while we wait).
  bool consumed(edge& e, uint64_t bytes, bool idle) noexcept;
  /// Credit to send for `e` (and resets it).
  credit_grant take_credit(edge& e) noexcept;
  /// An item of `e` (its index `idx`) was processed and its input re-sends:
  /// it is acknowledged once nothing holds it (pending_ack::waiting).
  pending_ack_ptr track(edge& e, size_t idx);
  /// Moves the oldest items of `e` that nothing holds any more to its
  /// `acked` count. True when there are acknowledgements to send.
  bool settle(edge& e);
  /// Records end_of_epoch(epoch) from `e`; returns the epochs that are now
  /// complete on every live input (to forward), in order.
  std::vector<uint64_t> end_epoch(edge& e, uint64_t epoch);
  /// Records the end of `e`'s stream (and marks it ended). The stream's end
  /// ends the epoch of the last item it delivered if no end_of_epoch did;
  /// an epoch it delivered no item of is not ended by it. Returns the
  /// epochs now complete, as end_epoch.
  std::vector<uint64_t> end_stream(edge& e);
  /// Whether every input has ended.
  bool all_ended() const noexcept;
  bool empty() const noexcept { return edges_.empty(); }
  std::vector<edge>& edges() noexcept { return edges_; }
  const std::vector<edge>& edges() const noexcept { return edges_; }
  /// Epochs forwarded downstream so far (checkpoints save and restore it
  /// with each edge's epochs_ended).
  uint64_t epochs_forwarded() const noexcept { return epochs_forwarded_; }
  void set_epochs_forwarded(uint64_t n) noexcept { epochs_forwarded_ = n; }

private:
  std::vector<uint64_t> newly_complete_epochs();

  std::vector<edge> edges_;
  uint64_t epochs_forwarded_ = 0;
};

} // namespace af
