// ps_shard: the actor (spawn_ps_shard), a ps_shard_actor (runtime/protocol/ps.hpp's
// table as a type). It turns those messages into calls on a ps_shard_state,
// holds the response promises of the requests that wait, and monitors the
// workers' actors.
#include "actorflow/actors/ps_shard/ps_shard.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include <caf/actor_system.hpp>
#include <caf/exit_reason.hpp>
#include <caf/sec.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <spdlog/spdlog.h>

#include "actorflow/runtime/core/census.hpp"
#include "actorflow/runtime/core/wire_dtype.hpp"
#include "actorflow/runtime/protocol/detail/coordinator.hpp"
#include "actorflow/runtime/protocol/stream.hpp"
#include "actorflow/runtime/stage/replica_label.hpp"

namespace af {

namespace {

struct shard_actor_state {
  std::unique_ptr<ps_shard_state> shard;
  std::string name;
  uint64_t next_ticket = 0;
  std::unordered_map<uint64_t, caf::typed_response_promise<ps_params>> pulls;
  // The pulls of ps_step requests that wait, with their push's ack.
  struct step_wait {
    ps_push_ack ack;
    caf::typed_response_promise<ps_push_ack, ps_params> rp;
  };
  std::unordered_map<uint64_t, step_wait> steps;
  std::unordered_map<uint64_t, caf::typed_response_promise<ps_progress>> waits;
  // Which actor speaks for each worker, and the actors monitored.
  std::map<uint32_t, caf::actor_addr> owner;
  std::set<caf::actor_addr> monitored;
  // Workers this shard saw go down before the coordinator said so: its
  // replica_lost for them is then old news, and must not drop a trainer
  // respawned in the meantime under the same worker id.
  std::set<uint32_t> seen_lost;
  // Who restored this shard (ps_restore_atom): told of the pushes lost
  // when a worker joins a shard restored while the job ran.
  coordinator_actor restorer;
};

using shard_actor = ps_shard_actor::stateful_pointer<shard_actor_state>;

// Remembers the sender as `worker`'s actor and monitors it. A pull or push
// only claims a worker nobody spoke for yet (implicit registration).
void track(shard_actor self, uint32_t worker, bool claim) {
  if (worker == ps_observer)
    return;
  auto& st = self->state;
  auto sender = self->current_sender();
  if (!sender)
    return;
  if (!claim && st.owner.count(worker) > 0)
    return;
  auto addr = caf::actor_cast<caf::actor_addr>(sender);
  st.owner[worker] = addr;
  if (st.monitored.insert(addr).second)
    self->monitor(caf::actor_cast<caf::actor>(sender));
}

void release(shard_actor self) {
  auto& st = self->state;
  auto r = st.shard->take_released();
  for (auto& [ticket, params] : r.pulls) {
    if (auto it = st.pulls.find(ticket); it != st.pulls.end()) {
      it->second.deliver(std::move(params));
      st.pulls.erase(it);
    } else if (auto at = st.steps.find(ticket); at != st.steps.end()) {
      at->second.rp.deliver(at->second.ack, std::move(params));
      st.steps.erase(at);
    }
  }
  for (auto& [ticket, progress] : r.waits) {
    auto it = st.waits.find(ticket);
    if (it == st.waits.end())
      continue;
    it->second.deliver(std::move(progress));
    st.waits.erase(it);
  }
}

caf::error invalid(std::string message) {
  spdlog::debug("{}", message);
  return caf::make_error(caf::sec::invalid_argument, std::move(message));
}

// A push: "" and its `ack`, or what is wrong with it. Gradients that came
// in 16 bits (Training.ps.wire) are applied in f32, as every update is.
std::string push(shard_actor self, const ps_push& req, ps_push_ack& ack) {
  auto& st = self->state;
  track(self, req.worker, false);
  std::string err;
  if (std::any_of(req.grads.begin(), req.grads.end(), [](const ps_slice& g) {
        return g.values.type() != dtype::f32;
      })) {
    auto wide = req;
    for (auto& g : wide.grads)
      if (g.values.type() == dtype::bf16 || g.values.type() == dtype::f16)
        g.values = widen_values(g.values);
    err = st.shard->push(wide, ack);
  } else {
    err = st.shard->push(req, ack);
  }
  if (err.empty())
    release(self);
  return err;
}

ps_shard_actor::behavior_type ps_shard_main(shard_actor self,
                                            ps_shard_config cfg) {
  auto& init = self->state;
  init.name = cfg.name.empty()
                ? replica_label(std::string{ps_service}, cfg.shard)
                : cfg.name;
  cfg.name = init.name;
  init.shard = std::make_unique<ps_shard_state>(std::move(cfg));
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& st = self->state;
    st.monitored.erase(dm.source);
    for (auto it = st.owner.begin(); it != st.owner.end();) {
      if (it->second != dm.source) {
        ++it;
        continue;
      }
      if (st.shard->is_live(it->first)) {
        spdlog::warn("{}: worker {} went down without done ({})", st.name,
                     it->first,
                     dm.reason ? caf::to_string(dm.reason) : "normal exit");
        st.shard->leave(it->first, true);
        st.seen_lost.insert(it->first);
      }
      it = st.owner.erase(it);
    }
    release(self);
  });
  self->set_exit_handler([=](caf::exit_msg& msg) {
    // Requests that wait must not hang their senders.
    if (!msg.reason)
      return; // like CAF's default: a normal exit of a linked actor
    auto& st = self->state;
    for (auto& [ticket, rp] : st.pulls)
      rp.deliver(caf::make_error(caf::sec::request_receiver_down,
                                 st.name + " is shutting down"));
    for (auto& [ticket, wait] : st.steps)
      wait.rp.deliver(caf::make_error(caf::sec::request_receiver_down,
                                      st.name + " is shutting down"));
    for (auto& [ticket, rp] : st.waits)
      rp.deliver(caf::make_error(caf::sec::request_receiver_down,
                                 st.name + " is shutting down"));
    st.pulls.clear();
    st.steps.clear();
    st.waits.clear();
    self->quit(std::move(msg.reason));
  });
  return {
    [=](ps_register_atom, uint32_t worker) -> uint64_t {
      auto& st = self->state;
      track(self, worker, true);
      bool left = st.shard->knows(worker) && !st.shard->is_live(worker);
      auto had = st.shard->clock_of(worker);
      auto v = st.shard->register_worker(worker);
      if (left)
        spdlog::info("{}: worker {} joins again at clock {} (it had left "
                     "at clock {})",
                     st.name, worker, st.shard->clock_of(worker), had);
      release(self);
      return v;
    },
    [=](ps_register_atom, uint32_t worker, uint64_t clock) -> uint64_t {
      auto& st = self->state;
      track(self, worker, true);
      auto had = st.shard->clock_of(worker);
      if (clock > had) {
        spdlog::warn("{}: worker {} joins at clock {}; its {} pushes since "
                     "clock {} are lost",
                     st.name, worker, clock, clock - had, had);
        if (st.restorer)
          self->send(st.restorer, ps_lost_atom::value, st.name, worker,
                     clock - had);
      }
      // (Its own clock: the client goes on from it.)
      auto v = st.shard->register_worker(worker, clock, false);
      release(self);
      return v;
    },
    [=](ps_clock_atom, uint32_t worker) -> uint64_t {
      return self->state.shard->clock_of(worker);
    },
    [=](ps_pause_atom, uint32_t worker) -> uint64_t {
      auto v = self->state.shard->pause(worker);
      release(self);
      return v;
    },
    [=](ps_done_atom, uint32_t worker) -> uint64_t {
      auto& st = self->state;
      st.owner.erase(worker);
      auto v = st.shard->leave(worker, false);
      release(self);
      return v;
    },
    [=](ps_pull_atom, const ps_pull& req) -> caf::result<ps_params> {
      auto& st = self->state;
      track(self, req.worker, false);
      auto ticket = st.next_ticket++;
      std::optional<ps_params> answer;
      if (auto err = st.shard->pull(ticket, req, answer); !err.empty())
        return invalid(std::move(err));
      if (answer)
        return std::move(*answer);
      auto rp = self->make_response_promise<ps_params>();
      st.pulls.emplace(ticket, rp);
      return rp;
    },
    [=](ps_push_atom, const ps_push& req) -> caf::result<ps_push_ack> {
      ps_push_ack ack;
      if (auto err = push(self, req, ack); !err.empty())
        return invalid(std::move(err));
      return ack;
    },
    [=](ps_step_atom, const ps_push& req,
        const ps_pull& next) -> caf::result<ps_push_ack, ps_params> {
      auto& st = self->state;
      ps_push_ack ack;
      if (auto err = push(self, req, ack); !err.empty())
        return invalid(std::move(err));
      auto ticket = st.next_ticket++;
      std::optional<ps_params> answer;
      if (auto err = st.shard->pull(ticket, next, answer); !err.empty())
        return invalid(std::move(err));
      if (answer)
        return {ack, std::move(*answer)};
      auto rp = self->make_response_promise<ps_push_ack, ps_params>();
      st.steps.emplace(ticket, shard_actor_state::step_wait{ack, rp});
      return rp;
    },
    [=](ps_wait_atom, uint64_t steps) -> caf::result<ps_progress> {
      auto& st = self->state;
      auto ticket = st.next_ticket++;
      if (auto p = st.shard->wait(ticket, steps))
        return *p;
      auto rp = self->make_response_promise<ps_progress>();
      st.waits.emplace(ticket, rp);
      return rp;
    },
    [=](ps_stats_atom) -> ps_shard_stats { return self->state.shard->stats(); },
    [=](replica_lost_atom, const std::string& stage, uint32_t replica) {
      auto& st = self->state;
      if (stage != st.shard->config().worker_stage
          || st.seen_lost.erase(replica) > 0 || !st.shard->is_live(replica))
        return;
      spdlog::warn("{}: worker {} lost (the coordinator says {}[{}] is "
                   "gone)",
                   st.name, replica, stage, replica);
      st.shard->leave(replica, true);
      release(self);
    },
    [=](replica_lost_atom, const std::string& stage, uint32_t replica,
        bool ended) {
      // From the coordinator to a shard it restored while the job runs: a
      // worker that ended (done) or was lost before, as far as the
      // restored snapshot knows still live or not known at all.
      auto& st = self->state;
      if (stage != st.shard->config().worker_stage)
        return;
      st.shard->leave(replica, !ended);
      release(self);
    },
    [=](service_snapshot_atom) -> std::string {
      return self->state.shard->snapshot();
    },
    [=](service_restore_atom,
        const std::string& bytes) -> caf::result<uint64_t> {
      auto& st = self->state;
      try {
        st.shard->restore(bytes);
      } catch (const std::invalid_argument& e) {
        spdlog::warn("{}", e.what());
        return invalid(e.what());
      }
      spdlog::info("{}: restored at version {}", st.name, st.shard->version());
      st.restorer = caf::actor_cast<coordinator_actor>(self->current_sender());
      release(self);
      return st.shard->version();
    },
  };
}

} // namespace

caf::actor spawn_ps_shard(caf::actor_system& sys, ps_shard_config cfg) {
  if (auto err = check(cfg); !err.empty())
    throw std::invalid_argument((cfg.name.empty() ? "ps shard" : cfg.name)
                                + ": " + err);
  auto label =
    cfg.name.empty() ? "ps shard " + std::to_string(cfg.shard) : cfg.name;
  auto a = caf::actor_cast<caf::actor>(
    sys.spawn<caf::detached>(ps_shard_main, std::move(cfg)));
  census_add(a, std::move(label));
  return a;
}

} // namespace af
