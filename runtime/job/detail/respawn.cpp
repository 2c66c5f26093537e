// Respawning a lost trainer while the job runs (docs/multi-host.md, "A
// lost trainer"): what it had not finished already went to the other
// trainers (recovery.cpp, hand_on_unfinished); a new replica of the same
// label starts on its own host once that node is back, or on the next host
// of its stage, and joins the running producers and the shards, where it
// goes on with the lost worker's clock (runtime/protocol/ps.hpp).
#include <algorithm>
#include <chrono>
#include <cstdio>

#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <spdlog/spdlog.h>

#include "actorflow/runtime/job/detail/coordinator_state.hpp"
#include "actorflow/runtime/job/detail/node_connect.hpp"
#include "actorflow/runtime/job/node.hpp"
#include "actorflow/runtime/job/relocate.hpp"
#include "actorflow/runtime/protocol/stream.hpp"
#include "actorflow/runtime/topology/topology.hpp"

namespace af::detail {

namespace {

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

// The running replicas of the stages that feed `stage`.
std::vector<replica_entry*> live_producers(coordinator_state& st,
                                           const std::string& stage) {
  std::vector<replica_entry*> out;
  for (auto& producer : st.plan->producers[stage])
    for (auto& r : st.replicas)
      if (r.stage == producer && !r.down && !r.done && !r.failed)
        out.push_back(&r);
  return out;
}

const topology::Stage* stage_spec(const coordinator_state& st,
                                  const std::string& stage, uint32_t* index) {
  auto& spec = *st.plan->spec;
  for (int i = 0; i < spec.stage_size(); ++i)
    if (spec.stage(i).name() == stage) {
      *index = static_cast<uint32_t>(i);
      return &spec.stage(i);
    }
  return nullptr;
}

// A new replica that does not take the lost one's place after all: it is
// stopped, and the services drop it (it registered with the shards as it
// started).
void drop_fresh(coordinator_self self, const stage_actor& fresh,
                const std::string& label) {
  auto& st = self->state;
  self->send_exit(fresh, caf::exit_reason::user_shutdown);
  auto stage = label.substr(0, label.rfind('['));
  for (auto& [name, handle] : st.services)
    self->send(handle, replica_lost_atom::value, stage, replica_of(label));
}

// The respawn of `label` ends: the note goes on its loss's line.
void give_up(coordinator_self self, const std::string& label,
             const std::string& why) {
  auto& st = self->state;
  st.respawns.respawning.erase(label);
  for (auto l = st.respawns.losses.rbegin(); l != st.respawns.losses.rend(); ++l)
    if (l->label == label) {
      l->respawn = "; not respawned: " + why;
      break;
    }
  spdlog::warn("{} is not respawned: {}; the job goes on without it", label,
               why);
}

// Whether the new replica `label` of `stage` is still wanted: its respawn
// (joining: its join) is under way, and the job goes on.
bool wanted(const coordinator_state& st, const std::string& stage,
            const std::string& label, bool joining) {
  if (!st.error.empty() || st.stopped || st.ckpt.halting)
    return false;
  return joining ? st.respawns.joining.count(stage) > 0 : st.respawns.respawning.count(label) > 0;
}

// A new replica does not take its place after all.
void not_joined(coordinator_self self, const std::string& stage,
                const std::string& label, bool joining,
                const std::string& why) {
  if (!joining) {
    give_up(self, label, why);
    return;
  }
  self->state.respawns.joining.erase(stage);
  spdlog::warn("{} does not join: {}", label, why);
}

// A replica that joined the running job (max_replicas) on `host`: a place
// of its own in the replica table, monitored, and a line in the result.
void record_joined(coordinator_self self, const std::string& stage,
                   const std::string& label, const std::string& host,
                   const stage_actor& fresh) {
  auto& st = self->state;
  char buf[32];
  replica_entry r;
  r.handle = fresh;
  r.label = label;
  r.stage = stage;
  r.host = host;
  r.cut = st.ckpt.checkpointing->replayed.count(stage) == 0;
  for (auto& other : st.replicas)
    if (other.stage == stage)
      r.may_fail = other.may_fail;
  st.replicas.push_back(std::move(r));
  self->monitor(fresh);
  st.respawns.joining.erase(stage);
  std::snprintf(buf, sizeof buf, "%.1f", seconds_since(st.begin));
  st.respawns.joined.push_back(label + " on host '" + host + "' " + buf
                      + " s after the start");
  spdlog::warn("{} joined on host '{}' ({} s after the start)", label, host,
               buf);
}

// A lost replica started again on `host`: it takes the lost one's place in
// the replica table; the lost one's counts stay in the totals.
void record_respawned(coordinator_self self, const std::string& label,
                      const std::string& host, const stage_actor& fresh) {
  auto& st = self->state;
  char buf[32];
  auto it = st.respawns.respawning.find(label);
  std::snprintf(buf, sizeof buf, "%.1f", seconds_since(it->second.began));
  st.respawns.respawning.erase(it);
  for (auto& r : st.replicas)
    if (r.label == label) {
      // Its last counts stay in the totals, as a stage of their own
      // ("train (lost)"); of its metrics only the counts stay (its
      // step is the worker's clock, which the new one goes on with).
      if (auto was = st.numbers.stats.find(label); was != st.numbers.stats.end()) {
        auto old = std::move(was->second);
        st.numbers.stats.erase(was);
        old.stage = label + " (lost)";
        old.stage_name += " (lost)";
        std::vector<metric> counts;
        for (auto& m : old.metrics)
          if (m.name == metric_name::samples
              || m.name == metric_name::samples_resumed
              || m.name == metric_name::skipped_steps)
            counts.push_back(m);
        old.metrics = std::move(counts);
        st.respawns.retired.push_back(std::move(old));
      }
      r.handle = fresh;
      r.host = host;
      r.down = r.failed = r.done = false;
      self->monitor(fresh);
    }
  for (auto l = st.respawns.losses.rbegin(); l != st.respawns.losses.rend(); ++l)
    if (l->label == label) {
      l->respawn =
        "; respawned on host '" + host + "' " + buf + " s after it was lost";
      break;
    }
  spdlog::warn("{} respawned on host '{}' ({} s after it was lost)", label,
               host, buf);
}

// The new replica `fresh` of `label` runs on `host`, a respawned one or
// (`joining`) one that joins the running job: it becomes a consumer of
// every running producer that takes it (add_output_atom), then it is
// recorded (record_respawned, record_joined) and wired to those.
void wire_fresh_replica(coordinator_self self, const std::string& stage,
                        const std::string& label, const std::string& host,
                        stage_actor fresh, bool joining) {
  auto& st = self->state;
  if (!wanted(st, stage, label, joining)) {
    drop_fresh(self, fresh, label);
    if (joining)
      st.respawns.joining.erase(stage);
    return;
  }
  auto producers = live_producers(st, stage);
  if (producers.empty()) {
    drop_fresh(self, fresh, label);
    not_joined(self, stage, label, joining,
               "its producers had ended their streams");
    return;
  }
  struct pending {
    size_t left = 0;
    wiring w;
    std::string refused; // producers' errors
  };
  auto p = std::make_shared<pending>();
  p->left = producers.size();
  auto handle = caf::actor_cast<caf::actor>(fresh);
  uint32_t index = 0;
  auto* s = stage_spec(st, stage, &index);
  auto done = [=] {
    auto& st = self->state;
    if (--p->left > 0)
      return;
    if (!wanted(st, stage, label, joining) || p->w.upstreams.empty()) {
      drop_fresh(self, fresh, label);
      if (!wanted(st, stage, label, joining)) {
        if (joining)
          st.respawns.joining.erase(stage);
        return;
      }
      not_joined(self, stage, label, joining,
                 p->refused.empty() ? "its producers had ended their streams"
                                    : "its producers did not take it ("
                                        + p->refused.substr(2) + ")");
      return;
    }
    // Items sent to it now would come after the barrier of a checkpoint
    // being taken.
    if (st.ckpt.round)
      abandon_round(self, label + (joining ? " joined" : " was respawned"));
    if (joining)
      record_joined(self, stage, label, host, fresh);
    else
      record_respawned(self, label, host, fresh);
    self->send(fresh, wire_atom::value, p->w);
  };
  for (auto* r : producers) {
    const topology::Input* in = nullptr;
    for (auto& i : s->input())
      if (i.stage() == r->stage)
        in = &i;
    auto edge = upstream_edge{
      caf::actor_cast<caf::actor>(r->handle), r->label,
      static_cast<uint64_t>(window_of(*in)),
      static_cast<uint64_t>(in->byte_budget()),
      st.plan->reassignable.count(r->stage) > 0
        || st.plan->resent.count(r->stage) > 0,
      true};
    self
      ->request(r->handle, std::chrono::seconds{60}, add_output_atom::value,
                downstream_edge{handle, label, true})
      .then(
        [=](bool added) {
          if (added)
            p->w.upstreams.push_back(edge);
          done();
        },
        [=](caf::error& err) {
          p->refused += "; " + edge.name + ": " + self->system().render(err);
          done();
        });
  }
}

// Asks the node at `address` to start replica `replica` of stage `stage`;
// `done` gets the new actor, `failed` why not.
template <class Done, class Failed>
void spawn_now(coordinator_self self, const std::string& stage,
               const std::string& address, uint32_t replica,
               std::chrono::milliseconds timeout, Done done, Failed failed) {
  auto parsed = parse_address(address);
  if (!parsed) {
    failed(std::string{"not a HOST:PORT address"});
    return;
  }
  uint32_t index = 0;
  stage_spec(self->state, stage, &index);
  request_node(self, *parsed, timeout)
    .then(
      [=](caf::node_id&, caf::strong_actor_ptr& ptr, std::set<std::string>&) {
        if (!ptr) {
          failed(std::string{"no spawner published there"});
          return;
        }
        auto& st = self->state;
        std::vector<std::string> names;
        std::vector<caf::actor> actors;
        for (auto& [service, handle] : st.services) {
          names.push_back(service.substr(0, service.rfind('[')));
          actors.push_back(caf::actor_cast<caf::actor>(handle));
        }
        self
          ->request(caf::actor_cast<node_spawner_actor>(ptr),
                    std::chrono::seconds{60}, spawn_stage_atom::value,
                    st.plan->topology_text, index, replica,
                    caf::actor_cast<caf::actor>(self), names, actors)
          .then(
            [=](caf::actor& fresh) {
              done(caf::actor_cast<stage_actor>(std::move(fresh)));
            },
            [=](caf::error& err) { failed(self->system().render(err)); });
      },
      [=](caf::error& err) { failed(self->system().render(err)); });
}

// A TCP connection to a node's port, tried on a thread of its own, for at
// most this long before CAF's middleman is asked to connect: its connect
// blocks it, and every other connect (tcp_probe).
constexpr auto probe_timeout = std::chrono::milliseconds{2000};
using probe_atom = caf::atom_constant<caf::atom("af_probe")>;

// spawn_now, once a TCP connection to `address` opened (a host that drops
// packets fails in probe_timeout instead of holding the middleman).
template <class Done, class Failed>
void spawn_on(coordinator_self self, const std::string& stage,
              const std::string& address, uint32_t replica,
              std::chrono::milliseconds timeout, Done done, Failed failed) {
  // (Spawned with an argument: CAF 0.17 dereferences an empty tuple for a
  // function spawned without one, which UBSan reports.)
  auto prober = self->spawn<caf::detached>(
    [](caf::event_based_actor*, std::string to) -> caf::behavior {
      return {[to](probe_atom) { return tcp_probe(to, probe_timeout); }};
    },
    address);
  self->request(prober, probe_timeout + std::chrono::seconds{5},
                probe_atom::value)
    .then(
      [=](std::string& why) {
        self->send_exit(prober, caf::exit_reason::user_shutdown);
        if (!why.empty()) {
          failed(why);
          return;
        }
        spawn_now(self, stage, address, replica, timeout, done, failed);
      },
      [=](caf::error& err) {
        self->send_exit(prober, caf::exit_reason::user_shutdown);
        failed(self->system().render(err));
      });
}

} // namespace

bool respawnable(const coordinator_state& st, const replica_entry& lost) {
  return st.plan && st.plan->spec && st.plan->respawned.count(lost.stage) > 0
         && st.error.empty() && !st.stopped && !st.ckpt.halting
         && !st.respawns.respawning.count(lost.label);
}

void respawn(coordinator_self self, const std::string& label) {
  auto& st = self->state;
  st.respawns.respawning[label] = respawn_attempt{};
  spdlog::info("respawning {}", label);
  try_respawn(self, label, 0);
}

void try_respawn(coordinator_self self, const std::string& label,
                 size_t attempt) {
  auto& st = self->state;
  auto it = st.respawns.respawning.find(label);
  if (it == st.respawns.respawning.end())
    return;
  if (!st.error.empty() || st.stopped || st.ckpt.halting) {
    st.respawns.respawning.erase(it);
    return;
  }
  auto* entry = &*std::find_if(st.replicas.begin(), st.replicas.end(),
                               [&](auto& r) { return r.label == label; });
  if (live_producers(st, entry->stage).empty()) {
    give_up(self, label, "its producers had ended their streams");
    return;
  }
  uint32_t index = 0;
  auto* s = stage_spec(st, entry->stage, &index);
  auto n = static_cast<size_t>(s->hosts_size());
  std::string why;
  if (!host_left(it->second, label, attempt, n, why)) {
    if (!why.empty())
      give_up(self, label, why);
    else
      self->delayed_send(self, std::chrono::seconds{1},
                         respawn_retry_atom::value, label);
    return;
  }
  // Its own host first (restarted at the same address), then the next.
  auto replica = replica_of(label);
  size_t own = replica % n;
  for (size_t h = 0; h < n; ++h)
    if (s->hosts(static_cast<int>(h)) == entry->host)
      own = h;
  auto name = s->hosts(static_cast<int>((own + attempt) % n));
  auto address = st.plan->addresses[name];
  auto next = [=](const std::string& why) {
    auto& st = self->state;
    if (auto it = st.respawns.respawning.find(label); it != st.respawns.respawning.end()) {
      it->second.failures += "; host '" + name + "' (" + address + "): " + why;
      try_respawn(self, label, attempt + 1);
    }
  };
  spdlog::debug("respawning {} on host '{}' ({})", label, name, address);
  auto stage = entry->stage;
  spawn_on(
    self, stage, address, replica, st.plan->connect_timeout,
    [=](stage_actor fresh) {
      wire_fresh_replica(self, stage, label, name, std::move(fresh), false);
    },
    next);
}

void poll_joiners(coordinator_self self) {
  auto& st = self->state;
  if (!st.error.empty() || st.stopped || st.ckpt.halting)
    return;
  for (auto& [stage, most] : st.plan->elastic) {
    if (st.respawns.joining.count(stage) || live_producers(st, stage).empty())
      continue;
    std::set<std::string> busy, labels;
    size_t running = 0;
    bool ending = false; // a replica ended its input: the stage is ending
    for (auto& r : st.replicas)
      if (r.stage == stage) {
        labels.insert(r.label);
        ending = ending || r.done;
        if (!r.down || st.respawns.respawning.count(r.label)) {
          ++running;
          busy.insert(r.host);
        }
      }
    // The lowest replica index not taken (a lost one that was not
    // respawned keeps its own): labels stay below max_replicas, which
    // --resume accepts.
    uint32_t replica = 0;
    while (labels.count(stage + "[" + std::to_string(replica) + "]"))
      ++replica;
    if (running >= most || ending || replica >= most)
      continue;
    // The hosts without a replica of the stage, one per poll, in turn.
    uint32_t index = 0;
    auto* s = stage_spec(st, stage, &index);
    std::vector<std::string> free;
    for (auto& h : s->hosts())
      if (!busy.count(h))
        free.push_back(h);
    if (free.empty())
      continue;
    auto host = free[st.respawns.join_cursor[stage]++ % free.size()];
    auto address = st.plan->addresses[host];
    auto label = stage + "[" + std::to_string(replica) + "]";
    st.respawns.joining[stage] = host;
    auto name = stage; // (a copy for the lambdas)
    spawn_on(
      self, name, address, replica, std::chrono::milliseconds{1000},
      [=](stage_actor fresh) {
        spdlog::info("node '{}' answers: {} starts there", host, label);
        wire_fresh_replica(self, name, label, host, std::move(fresh), true);
      },
      [=](const std::string& why) {
        spdlog::debug("no new replica of {} on host '{}': {}", name, host,
                      why);
        self->state.respawns.joining.erase(name);
      });
  }
}

} // namespace af::detail
