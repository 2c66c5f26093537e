// The coordinator's behaviour (runtime/job/detail/coordinator_state.hpp has its
// messages and state): it follows every replica and service actor of a job,
// tolerates or recovers from what it may lose, reports progress, and
// delivers the job's result once every replica is down.
#include <algorithm>
#include <chrono>
#include <cstdlib>

#include <caf/exit_reason.hpp>
#include <caf/sec.hpp>
#include <caf/system_messages.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <spdlog/spdlog.h>

#include "actorflow/runtime/job/detail/coordinator_state.hpp"
#include "actorflow/runtime/job/node.hpp"
#include "actorflow/runtime/protocol/ps.hpp"
#include "actorflow/runtime/protocol/service.hpp"
#include "actorflow/runtime/protocol/stream.hpp"

namespace af::detail {

// The replica index in a label such as "train[1]".
uint32_t replica_of(const std::string& label) {
  auto open = label.rfind('[');
  return static_cast<uint32_t>(
    std::strtoul(label.c_str() + open + 1, nullptr, 10));
}

namespace {

// A replica's report: its histograms and step-stamped values wait for the
// next progress snapshot, its counters replace the previous report's.
void keep_stats(coordinator_state& st, stage_stats&& s) {
  for (auto& h : s.histograms)
    st.numbers.histograms.push_back(std::move(h));
  s.histograms.clear();
  for (auto& e : s.scalars) {
    e.name = s.stage_name + "/" + e.name;
    st.numbers.scalars.push_back(std::move(e));
  }
  s.scalars.clear();
  auto label = s.stage;
  st.numbers.stats[label] = std::move(s);
}

job_progress progress_of(coordinator_state& st) {
  job_progress p;
  p.elapsed_s =
    std::chrono::duration<double>(clock_type::now() - st.begin).count();
  // Replicas that were respawned: their counts up to the loss.
  for (auto& s : st.respawns.retired) {
    if (s.is_sink) {
      p.items += s.items_in;
      p.records += s.records_in;
      p.bytes += s.bytes_in;
    }
  }
  // Stages in topology order (the order they were spawned in).
  for (auto& r : st.replicas) {
    auto it = st.numbers.stats.find(r.label);
    if (it == st.numbers.stats.end())
      continue;
    auto& s = it->second;
    if (s.is_sink) {
      p.items += s.items_in;
      p.records += s.records_in;
      p.bytes += s.bytes_in;
    }
    p.stages.push_back(s);
  }
  for (auto& s : st.respawns.retired)
    p.stages.push_back(s);
  p.histograms = std::move(st.numbers.histograms);
  st.numbers.histograms.clear();
  p.scalars = std::move(st.numbers.scalars);
  st.numbers.scalars.clear();
  if (st.numbers.node_traffic) {
    auto t = st.numbers.node_traffic->sample();
    p.coordinator_bytes = t.sent + t.received;
  }
  return p;
}

void kill_all(coordinator_self self) {
  for (auto& r : self->state.replicas)
    if (!r.down)
      self->send_exit(r.handle, caf::exit_reason::user_shutdown);
}

// A failed replica of a stage that allows it is tolerated while another
// replica of the stage is running or ended normally.
bool tolerate(coordinator_self self, replica_entry& failed,
              const std::string& cause) {
  auto& st = self->state;
  if (failed.failed)
    return true; // already counted (stream_error, then down)
  if (!failed.may_fail || !st.error.empty())
    return false; // (a job that failed does not go on without anything)
  for (auto& r : st.replicas)
    if (&r != &failed && r.stage == failed.stage && !r.failed
        && (!r.down || r.done)) {
      failed.failed = true;
      st.tolerated.push_back(failed.label + ": " + cause);
      if (st.plan && st.plan->resent.count(failed.stage))
        note_loss(st, failed.label);
      spdlog::warn("{} failed ({}); the job goes on without it", failed.label,
                   cause);
      for (auto& [label, handle] : st.services)
        self->send(handle, replica_lost_atom::value, failed.stage,
                   replica_of(failed.label));
      hand_on_unfinished(self, failed);
      return true;
    }
  return false;
}

// Checkpoints by time (checkpoint.every_seconds).
std::chrono::milliseconds tick_interval(const checkpoint_settings& c) {
  return std::chrono::milliseconds{static_cast<int64_t>(c.every_s * 1000)};
}

// Every replica and service actor of the job is spawned: follow them.
void on_start(coordinator_self self, const job_layout& l) {
  auto& st = self->state;
  for (size_t i = 0; i < l.handles.size(); ++i) {
    replica_entry r;
    r.handle = caf::actor_cast<stage_actor>(l.handles[i]);
    r.label = l.labels[i];
    r.stage = l.stages[i];
    r.may_fail = std::find(l.may_fail.begin(), l.may_fail.end(), r.stage)
                 != l.may_fail.end();
    r.cut = st.ckpt.checkpointing->replayed.count(r.stage) == 0;
    if (st.plan->spec)
      for (auto& s : st.plan->spec->stage())
        if (s.name() == r.stage && s.hosts_size() > 0)
          r.host = s.hosts(static_cast<int>(replica_of(r.label)
                                            % static_cast<uint32_t>(
                                              s.hosts_size())));
    st.replicas.push_back(std::move(r));
    self->monitor(l.handles[i]);
  }
  for (size_t i = 0; i < l.services.size(); ++i) {
    st.services.emplace_back(l.service_labels[i],
                             caf::actor_cast<service_actor>(l.services[i]));
    self->monitor(l.services[i]);
  }
  st.started = true;
  st.begin = clock_type::now();
  // The nodes' ports: this process's connections to them (it listens on
  // none) carry everything that crosses it.
  std::set<uint16_t> ports;
  for (auto& [host, address] : st.plan->addresses)
    if (auto a = parse_address(address))
      ports.insert(a->port);
  if (!ports.empty())
    st.numbers.node_traffic.emplace(std::move(ports));
  if (st.opts.on_progress || st.opts.listener)
    self->delayed_send(self, st.opts.progress_interval, progress_atom::value);
  if (st.ckpt.checkpointing->store && st.ckpt.checkpointing->every_s > 0)
    self->delayed_send(self, tick_interval(*st.ckpt.checkpointing),
                       checkpoint_tick_atom::value);
  if (!st.plan->elastic.empty())
    self->delayed_send(self, std::chrono::seconds{1}, join_poll_atom::value);
}

// A replica or a service actor went down: the end of a replica, or a loss
// that is tolerated, recovered from, or fails the job.
void on_down(coordinator_self self, caf::down_msg& dm) {
  auto& st = self->state;
  // A lost node shows as remote_link_unreachable on the actors that ran
  // there (its process died or froze, or its link was cut). A checkpoint
  // being taken must not complete without such a replica: a restart would
  // resume from a cut that lost it. (An actor of this process that ended
  // with that reason took it from a lost peer.)
  bool node_lost = dm.source.node() != self->node()
                   && dm.reason == caf::exit_reason::remote_link_unreachable;
  if (node_lost && st.ckpt.round)
    abandon_round(self, "a node was lost");
  std::string label_lost;
  for (auto& r : st.replicas)
    if (!r.down && r.handle.address() == dm.source) {
      r.down = true;
      label_lost = r.label;
      round_lost(self, r);
      if (!r.done && st.error.empty() && !st.ckpt.halting) {
        auto reason = dm.reason ? caf::to_string(dm.reason)
                                : std::string{"exited before its end of "
                                              "stream"};
        // Started again from the checkpoint instead, losing nothing
        // (job_options::restart_on_loss): a trainer or a reader, whose
        // stage would go on short of a replica. A one-to-one stage's
        // items still go to the other replicas.
        bool restart = st.opts.restart_on_loss && checkpoints_on(st)
                       && dm.reason == caf::exit_reason::remote_link_unreachable;
        bool handled = restart ? st.plan->one_to_one.count(r.stage) > 0
                                   && resend_lost(self, r, reason)
                               : tolerate(self, r, reason)
                                   || reassign(self, r, reason)
                                   || resend_lost(self, r, reason);
        // A trainer lost with its node starts again (runtime/job/detail/respawn.cpp).
        if (handled && !restart && node_lost && respawnable(st, r))
          respawn(self, r.label);
        bool others_could = st.plan->reassignable.count(r.stage) > 0
                            || st.plan->resent.count(r.stage) > 0;
        if (!handled)
          record_error(self, "stage " + r.label + " went down: " + reason
                               + (others_could && !restart
                                    ? " (and no other replica of the "
                                      "stage is left to take over its "
                                      "work)"
                                    : ""));
      }
    }
  std::vector<std::string> lost;
  for (auto& [label, handle] : st.services)
    if (handle.address() == dm.source)
      label_lost = label;
  for (auto& [label, handle] : st.services)
    if (handle.address() == dm.source && st.error.empty() && !st.ckpt.halting
        && !st.recovery.restoring.count(label)) {
      bool ending = std::all_of(st.replicas.begin(), st.replicas.end(),
                                [](auto& r) { return r.down; });
      if (!ending)
        lost.push_back(label);
    }
  for (auto& label : lost)
    service_lost(self, label,
                 dm.reason ? caf::to_string(dm.reason) : std::string{"exited"});
  // The job failed with this loss, or was failing when it came (a stage
  // that lost its peer there may report first): started again, it goes on
  // (run_result::recoverable). A loss recovered from (items re-sent, a
  // shard restored) leaves the job going, and a later failure is not it.
  if (node_lost && !label_lost.empty() && !st.error.empty()
      && st.lost_to_node.empty())
    st.lost_to_node = label_lost + " (" + caf::to_string(dm.reason) + ")";
  maybe_checkpoint(self, false);
  maybe_complete(self);
}

// job::stop: drain the job, or with checkpoints end it at a cut.
void on_stop(coordinator_self self) {
  auto& st = self->state;
  if (checkpoints_on(st) && !st.ckpt.final_taken && !st.stopped) {
    // Take a checkpoint and end at its cut.
    st.stopped = true;
    if (st.ckpt.round)
      st.ckpt.round->stop_after = true;
    else
      begin_round(self, false, true);
    return;
  }
  st.stopped = true;
  // Every replica: sources stop reading, stages that produce after
  // their input ended (cache replays) stop too.
  for (auto& r : st.replicas)
    if (!r.down)
      self->send(r.handle, stop_atom::value);
}

// The answer to ps_locate_atom is the current actor: the asker's own while
// it is not known to be lost here.
caf::result<caf::actor> locate(coordinator_self self,
                               const std::string& label) {
  auto& st = self->state;
  if (!st.error.empty())
    return caf::make_error(caf::sec::runtime_error, st.error);
  auto it = std::find_if(st.services.begin(), st.services.end(),
                         [&](auto& s) { return s.first == label; });
  if (it == st.services.end())
    return caf::make_error(caf::sec::invalid_argument,
                           "the job has no service actor " + label);
  auto r = st.recovery.restoring.find(label);
  if (r == st.recovery.restoring.end())
    return caf::actor_cast<caf::actor>(it->second);
  auto rp = self->make_response_promise<caf::actor>();
  r->second.waiting.push_back(rp);
  return rp;
}

} // namespace

void record_error(coordinator_self self, std::string message) {
  auto& st = self->state;
  if (!st.error.empty())
    return;
  st.error = std::move(message);
  spdlog::debug("job failed: {}", st.error);
  st.ckpt.round.reset(); // a checkpoint being taken is abandoned
  auto failed = caf::make_error(caf::sec::runtime_error, st.error);
  for (auto& [label, r] : st.recovery.restoring)
    for (auto& rp : r.waiting)
      rp.deliver(failed);
  st.recovery.restoring.clear();
  kill_all(self);
}

void maybe_complete(coordinator_self self) {
  auto& st = self->state;
  if (!st.started || st.ckpt.round)
    return;
  for (auto& r : st.replicas)
    if (!r.down)
      return;
  // Services live as long as some stage does.
  for (auto& [label, handle] : st.services)
    self->send_exit(handle, caf::exit_reason::user_shutdown);
  auto ended =
    caf::make_error(caf::sec::request_receiver_down, "the job has ended");
  for (auto& [label, r] : st.recovery.restoring)
    for (auto& rp : r.waiting)
      rp.deliver(ended);
  run_result result;
  result.ok = st.error.empty();
  result.stopped = st.stopped;
  result.error = st.error;
  result.tolerated_failures = st.tolerated;
  for (auto& loss : st.respawns.losses)
    result.tolerated_failures[loss.line] +=
      resent_note(st, loss)
      + (loss.respawn.empty() && st.respawns.respawning.count(loss.label)
           ? "; not respawned: the job ended while its hosts were tried"
           : loss.respawn);
  for (auto& r : st.recovery.restored)
    result.restored.push_back(r.text + ": " + std::to_string(r.lost)
                              + " steps lost");
  result.joined = st.respawns.joined;
  result.final = progress_of(st);
  result.checkpoints = st.ckpt.checkpoints;
  result.last_checkpoint = st.ckpt.last_checkpoint;
  result.last_checkpoint_step = st.ckpt.last_checkpoint_step;
  result.lost = st.lost_to_node;
  // (Not after abort(): a job the user aborted is not started again.)
  result.recoverable = !result.ok && !st.lost_to_node.empty()
                       && !st.aborted && st.ckpt.checkpointing
                       && st.ckpt.checkpointing->store;
  if (st.ckpt.checkpointing) {
    result.resumed_from = st.ckpt.checkpointing->resumed_from;
    result.resumed_step = st.ckpt.checkpointing->resumed_step;
  }
  st.result->deliver(std::move(result));
  self->quit();
}

coordinator_actor::behavior_type
coordinator_main(coordinator_self self, job_options opts,
                 std::shared_ptr<result_slot> result,
                 std::shared_ptr<checkpoint_settings> checkpointing,
                 std::shared_ptr<job_plan> plan) {
  self->state.opts = std::move(opts);
  self->state.plan = std::move(plan);
  self->state.result = result;
  self->state.ckpt.checkpointing = checkpointing;
  self->state.ckpt.last_checkpoint_step = checkpointing->resumed_step;
  self->attach_functor([result](const caf::error& reason) {
    // Only reached with a result still missing if the coordinator was
    // killed: waiters must not hang.
    run_result r;
    r.error = "the job's coordinator exited: "
              + (reason ? caf::to_string(reason) : std::string{"normal"});
    result->deliver(std::move(r));
  });
  self->set_down_handler([=](caf::down_msg& dm) { on_down(self, dm); });
  return {
    [=](start_atom, const std::vector<caf::actor>& handles,
        const std::vector<std::string>& labels,
        const std::vector<std::string>& stages,
        const std::vector<std::string>& may_fail,
        const std::vector<caf::actor>& services,
        const std::vector<std::string>& service_labels) {
      on_start(self, job_layout{handles, labels, stages, may_fail, services,
                                service_labels});
    },
    [=](stats_atom, stage_stats& s) {
      keep_stats(self->state, std::move(s));
      maybe_checkpoint(self, false);
    },
    [=](done_atom, stage_stats& s) {
      auto& st = self->state;
      auto label = s.stage;
      keep_stats(st, std::move(s));
      for (auto& r : st.replicas)
        if (r.label == label) {
          r.done = true;
          round_lost(self, r);
        }
      maybe_checkpoint(self, false);
    },
    [=](checkpoint_atom, uint64_t id, std::string& label, std::string& state,
        uint64_t step,
        bool ended) { on_cut(self, id, label, state, step, ended); },
    [=](checkpoint_tick_atom) {
      maybe_checkpoint(self, true);
      self->delayed_send(self, tick_interval(*self->state.ckpt.checkpointing),
                         checkpoint_tick_atom::value);
    },
    [=](checkpoint_timeout_atom, uint64_t id) {
      auto& st = self->state;
      if (!st.ckpt.round || st.ckpt.round->id != id)
        return;
      std::string who;
      for (auto& label : st.ckpt.round->waiting)
        who += (who.empty() ? "" : ", ") + label;
      abandon_round(self, "no cut after "
                            + std::to_string(st.ckpt.checkpointing->timeout.count())
                            + " ms (waiting for "
                            + (who.empty() ? "the services" : who) + ")");
    },
    [=](const stream_error& err) {
      if (self->state.ckpt.halting)
        return;
      for (auto& r : self->state.replicas)
        if (r.label == err.stage && !err.bad_input
            && tolerate(self, r, err.cause))
          return;
      record_error(self, "stage " + err.stage + " failed: " + err.cause);
    },
    [=](stop_atom) { on_stop(self); },
    [=](abort_atom, const std::string& reason) {
      self->state.aborted = true;
      record_error(self, reason);
    },
    [=](ps_watch_atom) {
      self->state.recovery.watchers.push_back(
        caf::actor_cast<caf::actor_addr>(self->current_sender()));
    },
    [=](restore_retry_atom, const std::string& label) {
      try_restore(self, label, 0);
    },
    [=](respawn_retry_atom, const std::string& label) {
      try_respawn(self, label, 0);
    },
    [=](join_poll_atom) {
      poll_joiners(self);
      self->delayed_send(self, std::chrono::seconds{1}, join_poll_atom::value);
    },
    [=](ps_lost_atom, const std::string& label, uint32_t worker,
        uint64_t pushes) {
      auto& st = self->state;
      for (auto r = st.recovery.restored.rbegin(); r != st.recovery.restored.rend(); ++r)
        if (r->label == label) {
          r->lost += pushes;
          spdlog::warn("{}: {} steps of worker {} lost with the old one ({} "
                       "in all)",
                       label, pushes, worker, r->lost);
          return;
        }
    },
    [=](ps_locate_atom, const std::string& label) -> caf::result<caf::actor> {
      return locate(self, label);
    },
    [=](progress_atom) {
      auto& st = self->state;
      auto p = progress_of(st);
      if (st.opts.listener) // dynamically typed (runtime/protocol/detail/coordinator.hpp)
        caf::unsafe_send_as(self, st.opts.listener, job_progress_atom::value,
                            p);
      if (st.opts.on_progress)
        st.opts.on_progress(p);
      self->delayed_send(self, st.opts.progress_interval, progress_atom::value);
    },
  };
}

} // namespace af::detail
