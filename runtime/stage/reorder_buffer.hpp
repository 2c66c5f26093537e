// The input side of a stage replica in deterministic mode: items from
// several input edges are handed to the stage in sequence-number order
// (batch::seq), whatever the order in which their edges delivered them, and
// each edge's markers (end of epoch, end of stream, checkpoint barrier) keep
// their place among that edge's items. Free of actor code, so that it can be
// tested on its own (tests/runtime/stage/reorder_buffer_test.cpp).
//
// Invariants (reordering on):
// - Items are released in strictly increasing seq, starting at 0, with no
//   gap: an item waits until every smaller sequence number was released.
// - A marker from edge e is released once every item that arrived on e
//   before it was released; items of other edges do not hold it.
// - A sequence number seen twice (or one below what was already released)
//   is an error: the producer side numbers items inconsistently.
// With reordering off, everything is released at once, in arrival order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <utility>
#include <vector>

#include "actorflow/runtime/core/batch.hpp"

namespace af {

/// One message a stage replica took from one of its input edges.
struct input_event {
  enum kind_type { item, epoch_end, stream_end, barrier } kind;
  size_t edge;        // index of the input edge it came from
  batch value;        // the item (kind == item)
  uint64_t epoch = 0; // epoch_end: the epoch; barrier: the checkpoint id
};

class reorder_buffer {
public:
  /// Starts over for `edges` input edges; `reorder` false makes the buffer
  /// pass everything through in arrival order.
  void reset(size_t edges, bool reorder);

  /// Takes `ev` (ev.edge < the edge count given to reset) and appends to
  /// `ready`, in order, whatever may be processed now: `ev` itself and what
  /// it unblocked. Throws std::runtime_error when an item's sequence number
  /// arrived before (nothing is queued then).
  void arrive(input_event ev, std::deque<input_event>& ready);

  /// Items held back waiting for a smaller sequence number.
  size_t waiting() const noexcept { return waiting_.size(); }
  /// The sequence number the next released item must have.
  uint64_t next_seq() const noexcept { return next_seq_; }

private:
  void release_markers(size_t edge, std::deque<input_event>& ready);

  bool reorder_ = false;
  uint64_t next_seq_ = 0;
  std::map<uint64_t, input_event> waiting_;
  // Per edge: items arrived, items released, and the markers held back with
  // the arrived count at the time they came.
  std::vector<uint64_t> arrived_, released_;
  std::vector<std::deque<std::pair<uint64_t, input_event>>> held_markers_;
};

} // namespace af
