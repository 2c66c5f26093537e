// The input side of a stage replica in deterministic mode: items from
// several input edges are handed to the stage in sequence-number order
// (batch::seq). Declared in runtime/stage/reorder_buffer.hpp.
#include "actorflow/runtime/stage/reorder_buffer.hpp"

#include <stdexcept>
#include <string>

namespace af {

void reorder_buffer::reset(size_t edges, bool reorder) {
  reorder_ = reorder;
  next_seq_ = 0;
  waiting_.clear();
  arrived_.assign(edges, 0);
  released_.assign(edges, 0);
  held_markers_.clear();
  held_markers_.resize(edges);
}

void reorder_buffer::release_markers(size_t edge,
                                     std::deque<input_event>& ready) {
  auto& q = held_markers_[edge];
  while (!q.empty() && released_[edge] >= q.front().first) {
    ready.push_back(std::move(q.front().second));
    q.pop_front();
  }
}

void reorder_buffer::arrive(input_event ev, std::deque<input_event>& ready) {
  if (!reorder_) {
    ready.push_back(std::move(ev));
    return;
  }
  auto edge = ev.edge;
  if (ev.kind != input_event::item) {
    held_markers_[edge].emplace_back(arrived_[edge], std::move(ev));
    release_markers(edge, ready);
    return;
  }
  ++arrived_[edge];
  auto seq = ev.value.seq;
  if (seq < next_seq_ || !waiting_.emplace(seq, std::move(ev)).second)
    throw std::runtime_error("deterministic mode: sequence number "
                             + std::to_string(seq)
                             + " arrived twice (a producer stage that "
                               "renumbers items has several replicas?)");
  for (auto it = waiting_.begin();
       it != waiting_.end() && it->first == next_seq_;
       it = waiting_.erase(it), ++next_seq_) {
    auto from = it->second.edge;
    ready.push_back(std::move(it->second));
    ++released_[from];
    release_markers(from, ready);
  }
}

} // namespace af
