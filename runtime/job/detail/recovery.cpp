// Recovery from lost machines while a job runs (docs/multi-host.md): a
// lost service actor (a parameter-server shard) is started again on
// another host of its placement from the last checkpoint; a lost replica's
// input goes to the other replicas of its stage (reassignable sources,
// one_to_one stages).
#include <algorithm>
#include <chrono>

#include <caf/exit_reason.hpp>
#include <caf/sec.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <spdlog/spdlog.h>

#include "actorflow/runtime/job/detail/coordinator_state.hpp"
#include "actorflow/runtime/job/detail/node_connect.hpp"
#include "actorflow/runtime/job/node.hpp"
#include "actorflow/runtime/protocol/ps.hpp"
#include "actorflow/runtime/protocol/service.hpp"
#include "actorflow/runtime/protocol/stream.hpp"

namespace af::detail {

namespace {

bool can_restore(const coordinator_state& st, const std::string& label) {
  return st.plan && st.plan->by_label.count(label) && st.ckpt.checkpointing
         && st.ckpt.checkpointing->store;
}

void fail_restore(coordinator_self self, const std::string& label,
                  const std::string& why) {
  auto& st = self->state;
  auto it = st.recovery.restoring.find(label);
  if (it == st.recovery.restoring.end())
    return;
  auto lost = it->second.why;
  record_error(self, label + " went down (" + lost
                       + ") and could not be restored: " + why);
}

// The new actor of `label` runs on `host` with the slice of the checkpoint
// at `step` (or its initial values: no checkpoint yet): tell it which
// workers are gone, hand it to whoever asked, and go on with it.
void finish_restore(coordinator_self self, const std::string& label,
                    size_t host, service_actor fresh, bool from_checkpoint,
                    uint64_t step) {
  auto& st = self->state;
  auto it = st.recovery.restoring.find(label);
  if (it == st.recovery.restoring.end() || !st.error.empty()) {
    self->send_exit(fresh, caf::exit_reason::user_shutdown);
    return;
  }
  auto waiting = std::move(it->second.waiting);
  st.recovery.restoring.erase(it);
  for (auto& rep : st.replicas)
    if (rep.done || rep.down || rep.failed)
      self->send(fresh, replica_lost_atom::value, rep.stage,
                 replica_of(rep.label), rep.done && !rep.failed);
  for (auto& [name, handle] : st.services)
    if (name == label)
      handle = fresh;
  self->monitor(fresh);
  auto& home = st.plan->by_label[label];
  home.host = host;
  std::string line =
    label + " on host '" + home.hosts[host] + "' from "
    + (from_checkpoint ? "the checkpoint at step " + std::to_string(step)
                       : std::string{"its initial values (no checkpoint "
                                     "was written yet)"});
  spdlog::warn("restored {}; the trainers' steps since then are lost to "
               "it (counted as each trainer joins it)",
               line);
  st.recovery.restored.push_back(restored_entry{label, std::move(line), 0});
  for (auto& rp : waiting)
    rp.deliver(caf::actor_cast<caf::actor>(fresh));
}

// The new actor is up: load the newest checkpoint's slice into it.
void load_restored(coordinator_self self, const std::string& label, size_t host,
                   service_actor fresh, size_t attempt) {
  auto& st = self->state;
  std::optional<checkpoint> c;
  try {
    c = st.ckpt.checkpointing->store->latest();
  } catch (const std::exception& ex) {
    self->send_exit(fresh, caf::exit_reason::user_shutdown);
    fail_restore(self, label, ex.what());
    return;
  }
  if (!c) {
    finish_restore(self, label, host, fresh, false, 0);
    return;
  }
  const std::string* bytes = nullptr;
  for (auto& p : c->parts)
    if (p.name == label)
      bytes = &p.bytes;
  auto where = st.ckpt.checkpointing->store->path_of(c->step);
  if (bytes == nullptr) {
    self->send_exit(fresh, caf::exit_reason::user_shutdown);
    fail_restore(self, label, where + " has no part for it");
    return;
  }
  auto step = c->step;
  self
    ->request(fresh, std::chrono::seconds{60}, service_restore_atom::value,
              *bytes)
    .then(
      [=](uint64_t) { finish_restore(self, label, host, fresh, true, step); },
      [=](caf::error& err) {
        self->send_exit(fresh, caf::exit_reason::user_shutdown);
        auto& st = self->state;
        if (auto it = st.recovery.restoring.find(label); it != st.recovery.restoring.end()) {
          it->second.failures +=
            "; host '" + st.plan->by_label[label].hosts[host] + "': loading "
            + where + ": " + self->system().render(err);
          try_restore(self, label, attempt + 1);
        }
      });
}

} // namespace

bool host_left(host_rounds& r, const std::string& label, size_t attempt,
               size_t n, std::string& give_up) {
  if (attempt == 0)
    r.failures.clear();
  if (attempt < n)
    return true;
  auto why = "no host could take it (" + r.failures.substr(2) + ")";
  if (clock_type::now() - r.began >= restore_patience) {
    give_up = why + " for " + std::to_string(restore_patience.count()) + " s";
    return false;
  }
  if (!r.retrying)
    spdlog::warn("{}: {}; trying again every second for {} s", label, why,
                 restore_patience.count());
  r.retrying = true;
  return false;
}

// Starts `label` on the next host of its placement: the other hosts
// first, its own last (a node restarted at the same address).
void try_restore(coordinator_self self, const std::string& label,
                 size_t attempt) {
  auto& st = self->state;
  auto it = st.recovery.restoring.find(label);
  if (it == st.recovery.restoring.end() || !st.error.empty())
    return;
  auto& home = st.plan->by_label[label];
  auto n = home.hosts.size();
  auto& r = it->second;
  std::string give_up;
  if (!host_left(r, label, attempt, n, give_up)) {
    if (!give_up.empty())
      fail_restore(self, label, give_up);
    else
      self->delayed_send(self, std::chrono::seconds{1},
                         restore_retry_atom::value, label);
    return;
  }
  auto host = (home.host + 1 + attempt) % n;
  auto name = home.hosts[host];
  auto address = st.plan->addresses[name];
  auto next = [=](const std::string& why) {
    auto& st = self->state;
    if (auto it = st.recovery.restoring.find(label); it != st.recovery.restoring.end()) {
      it->second.failures += "; host '" + name + "' (" + address + "): " + why;
      try_restore(self, label, attempt + 1);
    }
  };
  auto parsed = parse_address(address);
  if (!parsed) {
    next("not a HOST:PORT address");
    return;
  }
  if (r.retrying)
    spdlog::debug("restoring {} on host '{}' ({})", label, name, address);
  else
    spdlog::info("restoring {} on host '{}' ({})", label, name, address);
  request_node(self, *parsed, st.plan->connect_timeout)
    .then(
      [=](caf::node_id&, caf::strong_actor_ptr& ptr, std::set<std::string>&) {
        if (!ptr) {
          next("no spawner published there");
          return;
        }
        auto& st = self->state;
        auto& home = st.plan->by_label[label];
        self
          ->request(caf::actor_cast<node_spawner_actor>(ptr),
                    std::chrono::seconds{60}, spawn_service_atom::value,
                    st.plan->topology_text, home.service, home.index,
                    caf::actor_cast<caf::actor>(self))
          .then(
            [=](caf::actor& fresh) {
              load_restored(self, label, host,
                            caf::actor_cast<service_actor>(std::move(fresh)),
                            attempt);
            },
            [=](caf::error& err) { next(self->system().render(err)); });
      },
      [=](caf::error& err) { next(self->system().render(err)); });
}

// Replica `lost` of a one_to_one stage with other replicas went down: its
// producers send what it had not finished to the others, its consumers
// close its edge. False when no replica of the stage is left running.
bool resend_lost(coordinator_self self, replica_entry& lost,
                 const std::string& why) {
  auto& st = self->state;
  if (!st.plan || !st.plan->resent.count(lost.stage))
    return false;
  auto alive =
    std::any_of(st.replicas.begin(), st.replicas.end(), [&](auto& r) {
      return &r != &lost && r.stage == lost.stage && !r.down && !r.done
             && !r.failed;
    });
  if (!alive)
    return false;
  lost.failed = true;
  st.tolerated.push_back(lost.label + ": " + why);
  note_loss(st, lost.label);
  spdlog::warn("{} went down ({}); its unfinished items go to the other "
               "replicas of {}",
               lost.label, why, lost.stage);
  for (auto& [label, handle] : st.services)
    self->send(handle, replica_lost_atom::value, lost.stage,
               replica_of(lost.label));
  hand_on_unfinished(self, lost);
  return true;
}

void hand_on_unfinished(coordinator_self self, const replica_entry& lost) {
  auto& st = self->state;
  if (!st.plan || !st.plan->resent.count(lost.stage))
    return;
  // (Producers on the lost replica's node may not hear of its loss from
  // CAF: they are told.) A producer that has ended keeps nothing: what it
  // sent that was not finished is lost.
  for (auto& producer : st.plan->producers[lost.stage]) {
    tell_stage(self, producer, output_lost_atom::value, lost.label);
    for (auto& r : st.replicas)
      if (r.stage == producer && r.down && !st.respawns.losses.empty()
          && st.respawns.losses.back().label == lost.label)
        st.respawns.losses.back().ended_producers.push_back(r.label);
  }
  for (auto& consumer : st.plan->consumers[lost.stage])
    tell_stage(self, consumer, input_lost_atom::value, lost.label);
  // Items sent again now come after the barrier of a checkpoint being
  // taken, while they were read before its cut.
  if (st.ckpt.round)
    abandon_round(self, lost.label + " was lost");
}

void note_loss(coordinator_state& st, const std::string& label) {
  size_t before = 0;
  for (auto& l : st.respawns.losses)
    before += l.label == label;
  st.respawns.losses.push_back(loss_entry{st.tolerated.size() - 1, label, before, {}, ""});
}

std::string resent_note(const coordinator_state& st, const loss_entry& loss) {
  auto& label = loss.label;
  // Each producer's closed edges to `label`, in the order they closed: one
  // for each replica of that label it had and lost.
  uint64_t n = 0;
  for (auto& [who, s] : st.numbers.stats) {
    size_t k = 0;
    for (auto& e : s.out_edges)
      if (e.peer == label && e.closed && k++ == loss.incarnation)
        n += e.resent_items;
  }
  std::string note = "; " + std::to_string(n)
                     + " items it had not finished went to the other "
                       "replicas";
  if (!loss.ended_producers.empty()) {
    note += "; those it held from ";
    for (size_t i = 0; i < loss.ended_producers.size(); ++i)
      note += (i ? ", " : "") + loss.ended_producers[i];
    note += ", which had ended, were lost";
  }
  return note;
}

// Replica `lost` of a reassignable source stage went down: a surviving
// replica takes over its share and its consumers close its edge. False
// when no replica of the stage is left running to take it.
bool reassign(coordinator_self self, replica_entry& lost,
              const std::string& why) {
  auto& st = self->state;
  if (!st.plan || !st.plan->reassignable.count(lost.stage))
    return false;
  replica_entry* heir = nullptr;
  for (auto& r : st.replicas)
    if (&r != &lost && r.stage == lost.stage && !r.down && !r.done
        && !r.failed) {
      heir = &r;
      break;
    }
  if (heir == nullptr)
    return false;
  uint64_t from_epoch = 0;
  if (auto it = st.numbers.stats.find(lost.label); it != st.numbers.stats.end())
    from_epoch = it->second.epochs_ended;
  lost.failed = true;
  self->send(heir->handle, takeover_atom::value, replica_of(lost.label),
             from_epoch);
  for (auto& consumer : st.plan->consumers[lost.stage])
    tell_stage(self, consumer, input_lost_atom::value, lost.label);
  st.tolerated.push_back(lost.label + ": " + why + "; its input went to "
                         + heir->label + " from epoch "
                         + std::to_string(from_epoch));
  spdlog::warn("{} went down ({}); {} takes over its input from epoch {}",
               lost.label, why, heir->label, from_epoch);
  if (st.ckpt.checkpointing && st.ckpt.checkpointing->store
      && st.ckpt.no_more_checkpoints.empty()) {
    // A checkpoint now could not say which replica reads what.
    st.ckpt.no_more_checkpoints = lost.label + "'s input was reassigned";
    spdlog::warn("no more checkpoints in this job: {}; --resume would "
                 "continue from the last one before",
                 st.ckpt.no_more_checkpoints);
    if (st.ckpt.round)
      abandon_round(self, st.ckpt.no_more_checkpoints);
  }
  return true;
}

// Service actor `label` went down while the job runs.
void service_lost(coordinator_self self, const std::string& label,
                  const std::string& why) {
  auto& st = self->state;
  // Its clients stop waiting for its answers at once.
  for (auto& addr : st.recovery.watchers)
    if (auto client = caf::actor_cast<caf::actor>(addr))
      // A blocking actor, dynamically typed (runtime/protocol/detail/coordinator.hpp).
      caf::unsafe_send_as(self, client, ps_gone_atom::value, label);
  if (!can_restore(st, label)) {
    record_error(self, label + " went down: " + why
                         + (st.plan && st.plan->by_label.count(label)
                              ? " (with checkpoints, the job would restore "
                                "it on another node: docs/multi-host.md)"
                              : ""));
    return;
  }
  spdlog::warn("{} went down ({}); restoring it from the last checkpoint",
               label, why);
  if (st.ckpt.round)
    abandon_round(self, label + " went down");
  st.recovery.restoring[label].why = why;
  try_restore(self, label, 0);
}

} // namespace af::detail
