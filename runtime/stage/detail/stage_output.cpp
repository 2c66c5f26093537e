// What a stage replica sends: items and markers to its consumers, as their
// credit allows; credit back to its producers; stats and errors to the
// coordinator; and what happens when a consumer is lost.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <caf/sec.hpp>
#include <caf/send.hpp>

#include <spdlog/spdlog.h>

#include "actorflow/runtime/net/data_plane.hpp"
#include "actorflow/runtime/protocol/stream.hpp"
#include "actorflow/runtime/stage/detail/stage_state.hpp"

namespace af::detail {

stage_stats take_stats(stage_state& st) {
  auto result = st.stats;
  result.out_edges = st.out.stats();
  if (st.setup.logic) {
    st.setup.logic->metrics(result.metrics);
    st.setup.logic->take_histograms(result.histograms);
    st.setup.logic->take_scalars(result.scalars);
  }
  return result;
}

void replica_emitter::push(batch item) {
  if (st_.out.empty())
    throw std::logic_error("stage pushed an item but has no consumer");
  st_.outputs.push_back(
    output_event{output_event::item, std::move(item), 0});
}

void replica_emitter::end_epoch(uint64_t epoch) {
  st_.outputs.push_back(
    output_event{output_event::epoch_end, batch{}, epoch});
}

void replica_emitter::stop_inputs() {
  st_.stop_requested = true;
}

void replica_emitter::report_metrics() {
  if (st_.coordinator)
    caf::anon_send(st_.coordinator, stats_atom::value, take_stats(st_));
}

stage_actor via_data_plane(stage_self self, const stage_actor& peer) {
  return caf::actor_cast<stage_actor>(
    data_plane::route(self->system(), caf::actor_cast<caf::actor>(peer)));
}

namespace {

// Where the items and markers of edge `e` go.
stage_actor downstream(stage_self self, const outbound::edge& e) {
  return via_data_plane(self, e.peer);
}

void report_error(stage_self self, const stream_error& err) {
  auto& st = self->state;
  st.phase = replica_phase::failed;
  if (st.coordinator)
    self->send(st.coordinator, err);
  for (auto& e : st.out.edges())
    self->send(downstream(self, e), err);
}

// Items per message at most, so that one message never holds a consumer's
// whole window hostage while it is being processed.
constexpr size_t max_envelope = 64;

void send_envelope(stage_self self, outbound::edge& e) {
  if (e.envelope.empty())
    return;
  if (e.envelope.size() == 1) {
    self->send(downstream(self, e), std::move(e.envelope.front()));
    e.envelope.clear();
    return;
  }
  std::vector<batch> items;
  items.swap(e.envelope);
  e.envelope.reserve(items.size());
  self->send(downstream(self, e), std::move(items));
}

} // namespace

void fail(stage_self self, const std::string& cause, bool bad_input) {
  auto& st = self->state;
  if (st.failed())
    return;
  spdlog::error("{}: {}", st.label, cause);
  // Its last counts first (as when the coordinator stops it: stage_main).
  if (st.coordinator && st.wired())
    self->send(st.coordinator, stats_atom::value, take_stats(st));
  report_error(self, stream_error{st.label, cause, bad_input});
  st.inputs.clear();
  st.outputs.clear();
  for (auto& e : st.out.edges())
    e.envelope.clear();
  self->quit(caf::make_error(caf::sec::runtime_error, st.label + ": " + cause));
}

void send_envelopes(stage_self self) {
  for (auto& e : self->state.out.edges())
    send_envelope(self, e);
}

void flush_outputs(stage_self self) {
  auto& st = self->state;
  while (!st.outputs.empty()) {
    auto& ev = st.outputs.front();
    if (ev.kind == output_event::item) {
      if (st.out.empty()) {
        fail(self, "every consumer of this stage is gone; "
                     + std::to_string(st.outputs.size())
                     + " items cannot be delivered");
        return;
      }
      auto bytes = ev.value.byte_size();
      auto* e = st.out.pick(bytes);
      if (e == nullptr)
        return; // wait for credit
      ++st.stats.items_out;
      st.stats.records_out += static_cast<uint64_t>(ev.value.records());
      st.stats.bytes_out += bytes;
      st.out.sent(*e, bytes);
      // Delivered once the consumer acknowledges it (one that re-sends),
      // or a consumer on another node credits it back; any other consumer
      // on this node gets it for sure once it is sent (credit.hpp).
      if (e->keep || e->stats.remote)
        e->acks.push_back(std::move(ev.ack));
      else
        release_ack(self, ev.ack);
      if (e->keep)
        e->unacked.push_back(ev.value); // (tensors share their buffers)
      e->envelope.push_back(std::move(ev.value));
      if (e->envelope.size() >= max_envelope)
        send_envelope(self, *e);
    } else if (ev.kind == output_event::epoch_end) {
      send_envelopes(self);
      for (auto& e : st.out.edges())
        self->send(downstream(self, e), end_of_epoch_atom::value, ev.epoch);
      st.stats.epochs_ended = std::max(st.stats.epochs_ended, ev.epoch + 1);
      // The coordinator hears of a source's epochs at once: if this
      // replica is lost, another takes over its share from the epoch it
      // was in (stage_type::reassignable), and a stale count would repeat
      // a whole epoch of it.
      if (st.source && st.coordinator)
        self->send(st.coordinator, stats_atom::value, take_stats(st));
    } else if (ev.kind == output_event::barrier) {
      send_envelopes(self);
      for (auto& e : st.out.edges())
        self->send(downstream(self, e), barrier_atom::value, ev.epoch);
    } else {
      send_envelopes(self);
      for (auto& e : st.out.edges())
        self->send(downstream(self, e), end_of_stream_atom::value);
    }
    st.outputs.pop_front();
  }
}

void send_credit(stage_self self, inbound::edge& e) {
  auto grant = self->state.in.take_credit(e);
  if ((grant.items > 0 || grant.bytes > 0 || grant.acked > 0) && !e.ended)
    self->send(via_data_plane(self, e.peer), demand_atom::value, grant.items,
               grant.bytes, grant.acked);
}

pending_ack_ptr track_outputs(stage_state& st, size_t idx) {
  auto ack = st.in.track(st.in.edges()[idx], idx);
  for (auto& out : st.outputs)
    if (out.kind == output_event::item && !out.ack) {
      out.ack = ack;
      ++ack->waiting;
    }
  return ack;
}

void release_ack(stage_self self, const pending_ack_ptr& ack) {
  auto& st = self->state;
  if (ack && ack->waiting > 0 && --ack->waiting == 0)
    st.in.settle(st.in.edges()[ack->edge]);
}

void lose_output(stage_self self, peer_id id, const std::string& why,
                 bool abnormal) {
  auto& st = self->state;
  for (auto& e : st.out.edges())
    if (e.id == id) {
      auto name = e.stats.peer;
      // A consumer that ended normally did everything it was sent (or
      // needed no more: a stop): nothing of it goes out again.
      if (!abnormal) {
        e.unacked.clear();
        e.in_flight_items = 0;
        e.in_flight_bytes = 0;
      }
      std::vector<batch> again;
      std::vector<pending_ack_ptr> acks;
      auto lost = st.out.remove(id, &again, &acks);
      // `acks` are those of the last of `again` (all of them, on an edge
      // that keeps): those items go out again still holding their inputs;
      // what is not sent again (lost, or done by a consumer that ended)
      // lets its inputs go.
      auto kept = std::min(again.size(), acks.size());
      for (size_t i = 0; i < acks.size() - kept; ++i)
        release_ack(self, acks[i]);
      for (size_t i = again.size(); i-- > 0;) {
        st.outputs.push_front(
          output_event{output_event::item, std::move(again[i]), 0});
        if (i + kept >= again.size())
          st.outputs.front().ack =
            std::move(acks[acks.size() - (again.size() - i)]);
      }
      if (!again.empty())
        spdlog::warn("{}: consumer '{}' went down ({}); the {} items it had "
                     "not finished go to the other replicas",
                     st.label, name, why, again.size());
      if ((lost > 0 || (abnormal && again.empty()))
          && !(st.paused && lost == 0))
        spdlog::warn("{}: consumer '{}' went down ({}); {} items in flight "
                     "to it were lost, its credit is returned",
                     st.label, name, why, lost);
      return;
    }
}

} // namespace af::detail
