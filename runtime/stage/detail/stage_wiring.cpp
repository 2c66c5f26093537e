// A stage replica's wiring (wire_atom: its inputs and consumers, the
// stream protocol of runtime/protocol/stream.hpp) and the checkpoint state a
// resumed job's replica loads once wired (restore_atom).
#include <exception>
#include <string>
#include <utility>

#include <caf/typed_event_based_actor.hpp>

#include <spdlog/spdlog.h>

#include "actorflow/runtime/protocol/stream.hpp"
#include "actorflow/runtime/stage/detail/stage_state.hpp"

namespace af::detail {

namespace {

// A peer on another node reached on the data plane: its stand-in is
// monitored too. When the connection breaks (the link between the two
// nodes was cut, while both still reach the coordinator) the stand-in goes
// down, and the edge is handled as if the peer's node were lost: what was
// in flight on it is lost, and nothing may wait for it for good.
void monitor_stand_in(stage_self self, const stage_actor& peer) {
  auto to = via_data_plane(self, peer);
  if (id_of(to) != id_of(peer))
    self->monitor(to);
}

void add_consumer(stage_self self, const downstream_edge& d) {
  auto& st = self->state;
  st.out.add(caf::actor_cast<stage_actor>(d.peer), d.name);
  st.out.edges().back().keep = d.resend;
  st.out.edges().back().stats.remote = d.peer.node() != self->node();
  self->monitor(d.peer);
  monitor_stand_in(self, caf::actor_cast<stage_actor>(d.peer));
}

} // namespace

bool add_output(stage_self self, const downstream_edge& d) {
  auto& st = self->state;
  if (st.failed() || st.finishing() || !d.peer)
    return false;
  add_consumer(self, d);
  spdlog::info("{}: consumer '{}' joins (started while the job runs)",
               st.label, d.name);
  return true;
}

void keep_restore(stage_self self, std::string& state, bool ended) {
  auto& st = self->state;
  if (st.wired()) {
    spdlog::error("{}: a checkpoint's state came after the wiring; dropped",
                  st.label);
    return;
  }
  st.restore = pending_restore{std::move(state), ended};
}

bool wire(stage_self self, const wiring& w) {
  auto& st = self->state;
  if (st.wired()) {
    spdlog::error("{}: wired twice; the second wiring is dropped", st.label);
    return false;
  }
  // A peer that had exited before this wiring was read on this node comes
  // as a null handle: a clear error, not a crash.
  for (auto& u : w.upstreams)
    if (!u.peer) {
      fail(self, "input '" + u.name + "' had exited before this replica "
                   "was wired");
      return false;
    }
  for (auto& d : w.downstreams)
    if (!d.peer) {
      fail(self, "consumer '" + d.name + "' had exited before this "
                   "replica was wired");
      return false;
    }
  for (auto& u : w.upstreams) {
    auto peer = caf::actor_cast<stage_actor>(u.peer);
    // What the logic holds until done does not take the window's prefetch.
    auto window = u.window + (u.resend ? st.setup.logic->most_held() : 0);
    st.in.add(peer, u.name, window, u.byte_budget);
    st.in.edges().back().replaceable = u.replaceable;
    st.in.edges().back().resend = u.resend;
    self->monitor(peer);
    monitor_stand_in(self, peer);
    self->send(via_data_plane(self, peer), open_atom::value, window,
               u.byte_budget);
  }
  for (auto& d : w.downstreams)
    add_consumer(self, d);
  st.source = w.upstreams.empty();
  st.order.reset(w.upstreams.size(),
                 st.setup.deterministic && w.upstreams.size() > 1);
  st.barrier_in.assign(w.upstreams.size(), false);
  st.stats.is_sink = w.downstreams.empty();
  if (st.coordinator) {
    self->monitor(st.coordinator);
    self->delayed_send(self, st.setup.metrics_interval, tick_atom::value);
  }
  // What waited in the mailbox is handled from the next message on.
  st.phase = replica_phase::running;
  st.since = clock_type::now();
  if (st.restore) {
    try {
      if (st.restore->ended) {
        // Ended before the cut: end again without producing (its
        // inputs ended too and will say so).
        st.production = production_phase::done;
      } else {
        if (!st.restore->state.empty())
          restore_stage(st, st.restore->state);
        st.setup.logic->resume();
      }
    } catch (const std::exception& ex) {
      fail(self, std::string{"cannot restore the checkpoint: "} + ex.what());
      return false;
    }
    st.restore.reset();
  }
  return true;
}

} // namespace af::detail
