// Credit bookkeeping for the two ends of stream edges, free of any actor
// code so that it can be tested and reasoned about on its own. Declared in
// runtime/stage/credit.hpp.
#include "actorflow/runtime/stage/credit.hpp"

#include <algorithm>

namespace af {

bool outbound::edge::can_take(uint64_t bytes) const noexcept {
  if (!open || in_flight_items >= stats.window)
    return false;
  if (stats.byte_budget == 0 || in_flight_items == 0)
    return true;
  return in_flight_bytes + bytes <= stats.byte_budget;
}

void outbound::add(stage_actor peer, std::string name) {
  edge e;
  e.id = id_of(peer);
  e.peer = std::move(peer);
  e.stats.peer = std::move(name);
  edges_.push_back(std::move(e));
}

outbound::edge* outbound::find(peer_id id) noexcept {
  for (auto& e : edges_)
    if (e.id == id)
      return &e;
  return nullptr;
}

bool outbound::open(peer_id id, uint64_t window, uint64_t byte_budget) {
  auto* e = find(id);
  if (e == nullptr)
    return false;
  e->open = true;
  e->stats.window = window;
  e->stats.byte_budget = byte_budget;
  return true;
}

bool outbound::credit(peer_id id, const credit_grant& grant,
                      std::vector<pending_ack_ptr>& released) {
  auto* e = find(id);
  if (e == nullptr)
    return false;
  e->in_flight_items -= std::min(grant.items, e->in_flight_items);
  e->in_flight_bytes -= std::min(grant.bytes, e->in_flight_bytes);
  for (uint64_t i = 0; i < grant.acked && !e->unacked.empty(); ++i)
    e->unacked.pop_front();
  auto delivered = e->keep ? grant.acked : grant.items;
  for (uint64_t i = 0; i < delivered && !e->acks.empty(); ++i) {
    if (e->acks.front())
      released.push_back(std::move(e->acks.front()));
    e->acks.pop_front();
  }
  return true;
}

outbound::edge* outbound::pick(uint64_t bytes) noexcept {
  edge* best = nullptr;
  for (auto& e : edges_)
    if (e.can_take(bytes)
        && (best == nullptr || e.unused_items() > best->unused_items()))
      best = &e;
  return best;
}

void outbound::sent(edge& e, uint64_t bytes) noexcept {
  ++e.in_flight_items;
  e.in_flight_bytes += bytes;
  ++e.stats.items_sent;
  e.stats.bytes_sent += bytes;
  e.stats.max_in_flight_items =
    std::max(e.stats.max_in_flight_items, e.in_flight_items);
  e.stats.max_in_flight_bytes =
    std::max(e.stats.max_in_flight_bytes, e.in_flight_bytes);
}

uint64_t outbound::remove(peer_id id, std::vector<batch>* resend,
                          std::vector<pending_ack_ptr>* acks) {
  auto i = std::find_if(edges_.begin(), edges_.end(),
                        [id](const edge& e) { return e.id == id; });
  if (i == edges_.end())
    return 0;
  auto lost = i->in_flight_items;
  if (resend != nullptr && i->keep) {
    lost -= std::min<uint64_t>(lost, i->unacked.size());
    i->stats.resent_items += i->unacked.size();
    for (auto& b : i->unacked)
      resend->push_back(std::move(b));
  }
  if (acks != nullptr)
    acks->insert(acks->end(), i->acks.begin(), i->acks.end());
  i->stats.lost_items += lost;
  i->stats.closed = true;
  removed_.push_back(i->stats);
  edges_.erase(i);
  return lost;
}

std::vector<edge_stats> outbound::stats() const {
  std::vector<edge_stats> out;
  out.reserve(edges_.size() + removed_.size());
  for (auto& e : edges_)
    out.push_back(e.stats);
  out.insert(out.end(), removed_.begin(), removed_.end());
  return out;
}

void inbound::add(stage_actor peer, std::string name, uint64_t window,
                  uint64_t byte_budget) {
  edge e;
  e.id = id_of(peer);
  e.peer = std::move(peer);
  e.name = std::move(name);
  e.window = window;
  e.byte_budget = byte_budget;
  edges_.push_back(std::move(e));
}

inbound::edge* inbound::find(peer_id id) noexcept {
  for (auto& e : edges_)
    if (e.id == id)
      return &e;
  return nullptr;
}

bool inbound::consumed(edge& e, uint64_t bytes, bool idle) noexcept {
  ++e.done_items;
  e.done_bytes += bytes;
  if (e.held_items > 0)
    --e.held_items;
  // Credit goes back in chunks of half a window (double buffering): the
  // producer keeps half its window busy while the other half is consumed,
  // and the protocol sends one credit message per half window instead of
  // one per item (bench/stream_overhead measures the difference).
  auto chunk = std::max<uint64_t>(1, e.window / 2);
  return idle || e.done_items >= chunk;
}

credit_grant inbound::take_credit(edge& e) noexcept {
  credit_grant result{e.done_items, e.done_bytes, e.acked};
  e.done_items = 0;
  e.done_bytes = 0;
  e.acked = 0;
  return result;
}

pending_ack_ptr inbound::track(edge& e, size_t idx) {
  auto ack = std::make_shared<pending_ack>();
  ack->edge = idx;
  e.pending.push_back(ack);
  return ack;
}

bool inbound::settle(edge& e) {
  while (!e.pending.empty() && e.pending.front()->waiting == 0) {
    e.pending.pop_front();
    ++e.acked;
  }
  return e.acked > 0;
}

std::vector<uint64_t> inbound::end_epoch(edge& e, uint64_t epoch) {
  e.epochs_ended = std::max(e.epochs_ended, epoch + 1);
  return newly_complete_epochs();
}

std::vector<uint64_t> inbound::end_stream(edge& e) {
  e.ended = true;
  e.epochs_ended = std::max(e.epochs_ended, e.epochs_seen);
  return newly_complete_epochs();
}

std::vector<uint64_t> inbound::newly_complete_epochs() {
  // An epoch is complete when every input that is still running has ended
  // it; inputs that ended their stream have nothing more to say about it.
  // A lost input (its producer's share went to another replica) has
  // nothing to say at all.
  uint64_t complete = UINT64_MAX;
  bool any_live = false;
  for (auto& e : edges_)
    if (!e.ended) {
      any_live = true;
      complete = std::min(complete, e.epochs_ended);
    }
  if (!any_live)
    for (auto& e : edges_)
      if (!e.lost)
        complete = std::min(complete, e.epochs_ended);
  if (complete == UINT64_MAX) // every input lost
    complete = epochs_forwarded_;
  std::vector<uint64_t> result;
  if (edges_.empty())
    return result;
  for (; epochs_forwarded_ < complete; ++epochs_forwarded_)
    result.push_back(epochs_forwarded_);
  return result;
}

bool inbound::all_ended() const noexcept {
  return std::all_of(edges_.begin(), edges_.end(),
                     [](const edge& e) { return e.ended; });
}

} // namespace af
