// The stage replica actor: waits for its wiring, then runs the stream
// protocol of runtime/protocol/stream.hpp (af::stage_actor). Its state, what it
// sends, its wiring and its checkpoints are in runtime/stage/detail/stage_state.hpp,
// runtime/stage/detail/stage_output.cpp, runtime/stage/detail/stage_wiring.cpp and
// runtime/stage/detail/stage_checkpoint.cpp.
#include "actorflow/runtime/stage/stage.hpp"

#include <algorithm>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/exit_reason.hpp>
#include <caf/sec.hpp>
#include <caf/skip.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <spdlog/spdlog.h>

#include "actorflow/runtime/core/census.hpp"
#include "actorflow/runtime/net/data_plane.hpp"
#include "actorflow/runtime/protocol/stream.hpp"
#include "actorflow/runtime/stage/detail/stage_state.hpp"

namespace af::detail {

namespace {

// A source pushes at most this many items per message it handles, so that a
// fast source on a shared scheduler thread yields to other actors.
constexpr int produce_burst = 32;

// Credits the items from re-sending inputs that the logic no longer holds
// (stage_logic::held), oldest first, each at once: an item done whose
// credit waited for a half window would be sent again, and done twice, if
// this replica were lost.
void settle_held(stage_self self) {
  auto& st = self->state;
  auto held = st.setup.logic->held();
  while (st.credit_when_done.size() > held) {
    auto ack = std::move(st.credit_when_done.front());
    st.credit_when_done.pop_front();
    release_ack(self, ack);
    if (st.in.consumed(st.in.edges()[ack->edge], 0, true))
      send_credit(self, st.in.edges()[ack->edge]);
  }
}

// Whether a producer waits for the credit of items the logic holds: its
// window is used up (the logic held more than its most_held()). Then the
// logic must finish them now (stage_logic::release), or both wait. (Their
// bytes went back as they came: a byte budget never waits for them.)
bool held_blocks(const stage_state& st) {
  auto& edges = st.in.edges();
  for (auto& ack : st.credit_when_done)
    if (!edges[ack->edge].ended
        && edges[ack->edge].held_items >= edges[ack->edge].window)
      return true;
  return false;
}

// Runs one queued input through the stage.
void handle_input(stage_self self) {
  auto& st = self->state;
  auto ev = std::move(st.inputs.front());
  st.inputs.pop_front();
  auto& edge = st.in.edges()[ev.edge];
  switch (ev.kind) {
    case input_event::item: {
      auto bytes = ev.value.byte_size();
      ++st.stats.items_in;
      st.stats.records_in += static_cast<uint64_t>(ev.value.records());
      st.stats.bytes_in += bytes;
      edge.epochs_seen = std::max(edge.epochs_seen, ev.value.epoch + 1);
      st.setup.logic->process_from(edge.name, std::move(ev.value), st.emit);
      auto ack = edge.resend ? track_outputs(st, ev.edge) : nullptr;
      if (edge.resend && !st.outputs.empty()) {
        st.credit_after_output.emplace_back(std::move(ack), bytes);
      } else if (edge.resend) {
        // Its bytes go back now (a demand of 0 items): what the logic holds
        // must not use up the byte budget. The item's credit waits.
        edge.done_bytes += bytes;
        st.credit_when_done.push_back(std::move(ack));
        settle_held(self);
        send_credit(self, edge);
      } else if (st.in.consumed(edge, bytes, false)) {
        send_credit(self, edge);
      }
      break;
    }
    case input_event::epoch_end:
      for (auto epoch : st.in.end_epoch(edge, ev.epoch)) {
        st.setup.logic->end_of_epoch(epoch, st.emit);
        st.emit.end_epoch(epoch);
      }
      break;
    case input_event::barrier:
      // Rounds only grow. A barrier of an older round than the one pending
      // is of a round given up; one of a newer round means the pending one
      // was given up (a consumer added while it ran got its barrier from
      // some producers only): start over with the new one.
      if (st.checkpoint_pending && ev.epoch < st.checkpoint_id)
        break;
      if (st.checkpoint_pending && ev.epoch > st.checkpoint_id)
        std::fill(st.barrier_in.begin(), st.barrier_in.end(), false);
      st.barrier_in[ev.edge] = true;
      st.checkpoint_pending = true;
      st.checkpoint_id = ev.epoch;
      break;
    case input_event::stream_end:
      // Inputs that are still running may now complete an epoch. (Each
      // stream end used to end one more epoch than its input had: a cache
      // then ended its first replay when its input ended, and the shuffle
      // after it mixed that epoch's records into the next one.)
      for (auto epoch : st.in.end_stream(edge)) {
        st.setup.logic->end_of_epoch(epoch, st.emit);
        st.emit.end_epoch(epoch);
      }
      break;
  }
}

// Sources produce from the start; other stages may go on producing after
// their inputs ended (a cache replaying its epochs).
bool producing(const stage_state& st) {
  return (st.source || st.in.all_ended())
         && st.production == production_phase::open && !st.paused;
}

bool source_has_credit(stage_state& st) {
  for (auto& e : st.out.edges())
    if (e.can_take(0))
      return true;
  return false;
}

void stop_producing(stage_self self) {
  auto& st = self->state;
  if (st.production != production_phase::open)
    return;
  if (st.source)
    spdlog::info("{}: stopping early on request", st.label);
  st.production = production_phase::stopped;
  for (auto& e : st.in.edges())
    if (!e.eos_received)
      self->send(e.peer, stop_atom::value);
}

void finish_and_exit(stage_self self) {
  auto& st = self->state;
  if (st.coordinator)
    self->send(st.coordinator, done_atom::value, take_stats(st));
  self->quit();
}

// The stage's main loop, run after every message: send what can be sent,
// process what is queued while nothing waits for credit, let a source
// produce, and finish once every input has ended.
void pump(stage_self self) {
  auto& st = self->state;
  int produced = 0;
  try {
    for (;;) {
      if (st.failed())
        return;
      if (st.stop_requested) {
        st.stop_requested = false;
        for (auto& e : st.in.edges())
          if (!e.eos_received)
            self->send(e.peer, stop_atom::value);
      }
      flush_outputs(self);
      if (st.failed())
        return;
      if (!st.outputs.empty())
        break;
      // What the items made went out: their credit goes back (and their
      // producers may forget them once nothing else holds them).
      for (auto& [ack, bytes] : st.credit_after_output) {
        release_ack(self, ack);
        if (st.in.consumed(st.in.edges()[ack->edge], bytes, false))
          send_credit(self, st.in.edges()[ack->edge]);
      }
      st.credit_after_output.clear();
      if (!st.inputs.empty()) {
        handle_input(self);
        continue;
      }
      if (!st.credit_when_done.empty() && held_blocks(st)) {
        st.setup.logic->release(st.emit);
        settle_held(self);
        if (!st.credit_when_done.empty() && held_blocks(st))
          throw std::logic_error("release() left items held that a "
                                 "producer waits for");
        continue;
      }
      if (st.checkpoint_pending && !st.finishing() && cut_reached(st)) {
        take_cut(self);
        settle_held(self);
        continue;
      }
      if (producing(st)) {
        if (!st.out.empty() && !source_has_credit(st))
          break;
        if (produced++ == produce_burst) {
          if (!st.produce_scheduled) {
            st.produce_scheduled = true;
            self->send(self, produce_atom::value);
          }
          break;
        }
        if (!st.setup.logic->produce(st.emit))
          st.production = production_phase::done;
        continue;
      }
      bool inputs_done = (st.source || st.in.all_ended())
                         && st.production != production_phase::open;
      if (inputs_done && !st.finishing()) {
        st.setup.logic->finish(st.emit);
        settle_held(self);
        st.outputs.push_back(
          output_event{output_event::stream_end, batch{}, 0});
        st.phase = replica_phase::finishing;
        continue;
      }
      if (st.finishing()) {
        // Not before every consumer opened its edge. A replica that ends
        // at once (one that had ended at a resumed checkpoint's cut) would
        // otherwise be gone before a consumer on its node read its
        // wiring, where CAF then gives the consumer a null handle for it.
        if (std::any_of(st.out.edges().begin(), st.out.edges().end(),
                        [](auto& e) { return !e.open; }))
          break;
        finish_and_exit(self);
        return;
      }
      break;
    }
  } catch (const input_error& ex) {
    fail(self, ex.what(), true);
    return;
  } catch (const std::exception& ex) {
    fail(self, ex.what());
    return;
  }
  send_envelopes(self);
  // Idle: hand back every bit of credit we hold so no producer waits on us
  // (and what may be forgotten).
  if (st.inputs.empty())
    for (auto& e : st.in.edges())
      if (e.done_items > 0 || e.acked > 0)
        send_credit(self, e);
  st.waiting_for_credit = !st.outputs.empty() || producing(st);
}

// Time accounting around every message: the gap since the last message is
// waiting (for credit or for input), the handler itself is busy time.
template <class F>
void account(stage_self self, F&& f) {
  auto& st = self->state;
  auto start = clock_type::now();
  std::chrono::duration<double> gap = start - st.since;
  if (st.waiting_for_credit)
    st.stats.wait_credit_s += gap.count();
  else
    st.stats.wait_input_s += gap.count();
  f();
  if (!self->getf(caf::abstract_actor::is_terminated_flag)) {
    pump(self);
  }
  st.since = clock_type::now();
  std::chrono::duration<double> busy = st.since - start;
  st.stats.busy_s += busy.count();
}

// A stream message: kept in the mailbox until the replica is wired, then
// handled by `f` under account().
template <class F>
caf::result<void> on_message(stage_self self, F&& f) {
  if (!self->state.wired())
    return caf::skip;
  account(self, std::forward<F>(f));
  return caf::unit;
}

inbound::edge* sender_edge(stage_self self) {
  auto& st = self->state;
  const auto& sender = self->current_sender();
  if (auto* e = st.in.find(caf::actor_cast<caf::actor_control_block*>(sender)))
    return e;
  // A message from a node that was just lost can still be on its way
  // through CAF's BASP workers; CAF 0.17 then names its sender by a new
  // proxy, not the one the edge knows. The same actor (node and id) is the
  // same input: its items count (the producer upstream credited them and
  // will not send them again).
  if (sender)
    for (auto& e : st.in.edges())
      if (e.peer && e.peer.id() == sender->id()
          && e.peer.node() == sender->node())
        return &e;
  return nullptr;
}

// The consumer that sent the current message (open or demand), as the
// output edge knows it: on the data plane its sender is the consumer's
// stand-in, the same actor (node and id) as the edge's peer.
peer_id sender_output(stage_self self) {
  auto& st = self->state;
  const auto& sender = self->current_sender();
  auto id = caf::actor_cast<caf::actor_control_block*>(sender);
  if (!sender)
    return id;
  for (auto& e : st.out.edges())
    if (e.id == id
        || (e.peer && e.peer.id() == sender->id()
            && e.peer.node() == sender->node()))
      return e.id;
  return id;
}

// Queues an arrived item or marker for processing (see stage_state::order).
void arrive(stage_state& st, input_event ev) {
  st.order.arrive(std::move(ev), st.inputs);
}

size_t index_of(const stage_state& st, const inbound::edge& e) {
  return static_cast<size_t>(&e - st.in.edges().data());
}

void arrive_marker(stage_state& st, const inbound::edge& e,
                   input_event::kind_type kind, uint64_t epoch = 0) {
  arrive(st, input_event{kind, index_of(st, e), batch{}, epoch});
}

// Queues items that arrived from the current sender.
void enqueue_items(stage_self self, batch* items, size_t count) {
  auto& st = self->state;
  if (st.failed())
    return;
  auto* e = sender_edge(self);
  if (e == nullptr) {
    // Not one of our inputs: say so, a dropped item is lost data.
    const auto& sender = self->current_sender();
    spdlog::warn("{}: dropped {} items from {}, which is not one of its "
                 "inputs",
                 st.label, count,
                 sender ? caf::to_string(sender->address()) : "nobody");
    return;
  }
  auto idx = index_of(st, *e);
  for (size_t i = 0; i < count; ++i) {
    st.in.received(*e);
    arrive(st, input_event{input_event::item, idx, std::move(items[i]), 0});
  }
}

// The producer of `e` was lost and its share of the input went to another
// replica (stage_type::reassignable): what it sent is processed, then the
// edge counts as ended.
void lose_input(stage_self self, inbound::edge& e, const std::string& why) {
  auto& st = self->state;
  if (e.eos_received)
    return;
  spdlog::warn("{}: input '{}' was lost ({}); another replica takes over its "
               "share",
               st.label, e.name, why);
  e.eos_received = true;
  e.lost = true;
  arrive_marker(st, e, input_event::stream_end);
}

// A producer on another node sends its items and its end of stream on the
// data plane, and CAF sends its down message its own way (through the
// coordinator's node): the down can overtake them. So the down of such an
// input that has not ended is taken again once the data plane delivered
// everything that node sent before it (data_plane::drain). True when it was
// held back.
bool drain_first(stage_self self, const inbound::edge& e,
                 const caf::down_msg& dm) {
  auto& st = self->state;
  auto id = id_of(e.peer);
  if (st.drained.erase(id) > 0)
    return false; // its second time
  if (!e.peer || e.peer.node() == self->node())
    return false;
  auto plane = data_plane::of(self->system());
  if (!plane)
    return false;
  st.drained.insert(id);
  plane->drain(e.peer.node(), [me = caf::actor_cast<caf::actor>(self), dm] {
    caf::anon_send(me, dm);
  });
  return true;
}

void on_down(stage_self self, caf::down_msg& dm) {
  account(self, [&] {
    auto& st = self->state;
    if (st.failed())
      return;
    peer_id id = caf::actor_cast<caf::actor_control_block*>(dm.source);
    if (st.coordinator && id == id_of(st.coordinator)) {
      // Nobody is left to report to or to shut us down.
      self->quit(dm.reason);
      return;
    }
    auto* e = st.in.find(id);
    if (e == nullptr)
      // A stand-in on the data plane whose connection broke: the same
      // node and id as the peer it stands for (monitored by wire()).
      for (auto& in : st.in.edges())
        if (in.peer && in.peer.id() == dm.source.id()
            && in.peer.node() == dm.source.node())
          e = &in;
    if (e != nullptr) {
      if (!e->eos_received && drain_first(self, *e, dm))
        return;
      if (!e->eos_received && e->replaceable) {
        lose_input(self, *e,
                   dm.reason ? caf::to_string(dm.reason)
                             : std::string{"exited"});
        return;
      }
      if (!e->eos_received && st.paused && !st.checkpoint_pending) {
        // Stopped at a checkpoint's cut: the job ends here on purpose and
        // nothing that was in flight is lost (it is in the checkpoint).
        self->quit(dm.reason);
        return;
      }
      if (!e->eos_received) {
        auto reason =
          dm.reason ? caf::to_string(dm.reason) : std::string{"exited"};
        fail(self, "input from '" + e->name
                     + "' went down before its end "
                       "of stream: "
                     + reason);
      }
      return;
    }
    for (auto& out : st.out.edges())
      if (out.id != id && out.peer && out.peer.id() == dm.source.id()
          && out.peer.node() == dm.source.node())
        id = out.id; // a stand-in, as above
    lose_output(self, id,
                dm.reason ? caf::to_string(dm.reason) : std::string{"exited"},
                static_cast<bool>(dm.reason));
  });
}

// A replica: waits for its wiring (and a checkpoint's state), then runs
// the stream protocol (runtime/protocol/stream.hpp, af::stage_actor).
stage_actor::behavior_type stage_main(stage_self self, stage_setup setup) {
  auto& st = self->state;
  st.label = setup.info.label();
  st.stats.stage = st.label;
  st.stats.stage_name = setup.info.name;
  st.stats.replica = setup.info.replica;
  st.coordinator = caf::actor_cast<coordinator_actor>(setup.coordinator);
  st.setup = std::move(setup);
  self->set_down_handler([self](caf::down_msg& dm) { on_down(self, dm); });
  // Stopped from outside (the coordinator ends a failed job): the last
  // counts go to the coordinator first, so that a job started again after
  // a lost node can say how far its consumers had come (run_result's
  // restarts). Otherwise CAF's default: quit on any reason but normal.
  self->set_exit_handler([self](caf::exit_msg& msg) {
    if (!msg.reason)
      return;
    auto& st = self->state;
    if (st.coordinator && st.wired())
      self->send(st.coordinator, stats_atom::value, take_stats(st));
    self->quit(msg.reason);
  });
  // The items first: CAF tries the handlers in this order.
  return {
    [=](std::vector<batch>& items) -> caf::result<void> {
      return on_message(
        self, [&] { enqueue_items(self, items.data(), items.size()); });
    },
    [=](batch& item) -> caf::result<void> {
      return on_message(self, [&] { enqueue_items(self, &item, 1); });
    },
    [=](end_of_epoch_atom, uint64_t epoch) -> caf::result<void> {
      return on_message(self, [&] {
        if (auto* e = sender_edge(self))
          arrive_marker(self->state, *e, input_event::epoch_end, epoch);
      });
    },
    [=](end_of_stream_atom) -> caf::result<void> {
      return on_message(self, [&] {
        if (auto* e = sender_edge(self)) {
          e->eos_received = true;
          arrive_marker(self->state, *e, input_event::stream_end);
        }
      });
    },
    [=](open_atom, uint64_t window, uint64_t byte_budget) -> caf::result<void> {
      return on_message(self, [&] {
        self->state.out.open(sender_output(self), window, byte_budget);
      });
    },
    [=](demand_atom, uint64_t items, uint64_t bytes,
        uint64_t acked) -> caf::result<void> {
      return on_message(self, [&] {
        std::vector<pending_ack_ptr> released;
        self->state.out.credit(sender_output(self),
                               credit_grant{items, bytes, acked}, released);
        for (auto& ack : released)
          release_ack(self, ack);
      });
    },
    [=](barrier_atom, uint64_t id) -> caf::result<void> {
      return on_message(self, [&] {
        if (auto* e = sender_edge(self))
          arrive_marker(self->state, *e, input_event::barrier, id);
      });
    },
    [=](checkpoint_atom, uint64_t id) -> caf::result<void> {
      return on_message(self, [&] {
        auto& st = self->state;
        if (st.failed())
          return;
        if (st.finishing()) {
          // Ended (or ending): nothing of the stream is left here.
          if (st.coordinator)
            self->send(st.coordinator, checkpoint_atom::value, id, st.label,
                       std::string{}, uint64_t{0}, true);
          return;
        }
        st.checkpoint_pending = true;
        st.checkpoint_id = id;
      });
    },
    [=](resume_atom, uint64_t) -> caf::result<void> {
      return on_message(self, [&] {
        auto& st = self->state;
        if (!st.paused)
          return;
        st.paused = false;
        st.setup.logic->resume();
      });
    },
    [=](produce_atom) -> caf::result<void> {
      return on_message(self, [&] { self->state.produce_scheduled = false; });
    },
    [=](takeover_atom, uint32_t replica,
        uint64_t from_epoch) -> caf::result<void> {
      return on_message(self, [&] {
        auto& st = self->state;
        if (st.failed() || st.production == production_phase::stopped)
          return;
        try {
          if (st.finishing())
            throw std::runtime_error("it has ended its stream already");
          st.setup.logic->take_over(replica, from_epoch);
          st.production = production_phase::open; // produce() decides again
        } catch (const std::exception& ex) {
          fail(self, std::string{"cannot take over replica "}
                       + std::to_string(replica) + ": " + ex.what());
        }
      });
    },
    [=](output_lost_atom, const std::string& consumer) -> caf::result<void> {
      return on_message(self, [&] {
        for (auto& e : self->state.out.edges())
          if (e.stats.peer == consumer) {
            lose_output(self, e.id, "its node is lost, the coordinator says",
                        true);
            return;
          }
      });
    },
    [=](add_output_atom, const downstream_edge& d) -> caf::result<bool> {
      if (!self->state.wired())
        return caf::skip;
      bool added = false;
      account(self, [&] { added = add_output(self, d); });
      return added;
    },
    [=](input_lost_atom, const std::string& producer) -> caf::result<void> {
      return on_message(self, [&] {
        for (auto& e : self->state.in.edges())
          if (e.name == producer)
            lose_input(self, e, "its node is lost, the coordinator says");
      });
    },
    [=](stop_atom) -> caf::result<void> {
      // From the coordinator (Ctrl-C) or from a consumer that needs no more
      // input (take): stop producing and pass the request upstream.
      return on_message(self, [&] { stop_producing(self); });
    },
    [=](const stream_error& err) -> caf::result<void> {
      // Failure reports travel downstream with the data; the coordinator
      // already has it from the origin and will shut the job down.
      auto& st = self->state;
      if (!st.wired())
        return caf::skip;
      if (st.failed())
        return caf::unit;
      st.phase = replica_phase::failed;
      st.inputs.clear();
      st.outputs.clear();
      for (auto& e : st.out.edges())
        self->send(e.peer, err);
      return caf::unit;
    },
    [=](tick_atom) {
      // Sent only once wired.
      auto& st = self->state;
      if (st.coordinator)
        self->send(st.coordinator, stats_atom::value, take_stats(st));
      self->delayed_send(self, st.setup.metrics_interval, tick_atom::value);
    },
    [=](restore_atom, std::string& state, bool ended) {
      keep_restore(self, state, ended);
    },
    [=](wire_atom, const wiring& w) {
      if (wire(self, w))
        pump(self);
    },
  };
}

} // namespace

} // namespace af::detail

namespace af {

caf::actor spawn_stage(caf::actor_system& sys, stage_setup setup) {
  auto label = setup.info.label();
  using detail::stage_main;
  auto a = setup.blocking
             ? sys.spawn<caf::detached>(stage_main, std::move(setup))
             : sys.spawn(stage_main, std::move(setup));
  // The job holds its replicas untyped (runtime/protocol/stream.hpp, wiring).
  auto handle = caf::actor_cast<caf::actor>(a);
  census_add(handle, std::move(label));
  return handle;
}

} // namespace af
