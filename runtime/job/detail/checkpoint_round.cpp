// Checkpoint rounds (docs/checkpoints.md): the coordinator asks every
// replica of the cut to cut its stream, collects their states and the
// service actors' snapshots, and writes them with the job's own part
// (runtime/job/job_part.hpp) as one checkpoint.
#include <algorithm>
#include <chrono>

#include <caf/exit_reason.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <spdlog/spdlog.h>

#include "actorflow/runtime/job/detail/coordinator_state.hpp"
#include "actorflow/runtime/protocol/service.hpp"
#include "actorflow/runtime/protocol/stream.hpp"

namespace af::detail {

bool checkpoints_on(const coordinator_state& st) {
  return st.ckpt.checkpointing && st.ckpt.checkpointing->store && st.error.empty()
         && !st.ckpt.halting && st.ckpt.no_more_checkpoints.empty();
}

namespace {

// A replica's steps: its metric "step" (trainers), or what it had when it
// ended before the cut the job resumed from.
uint64_t steps_of(const coordinator_state& st, const std::string& label) {
  uint64_t steps = 0;
  if (auto it = st.ckpt.checkpointing->resumed_steps.find(label);
      it != st.ckpt.checkpointing->resumed_steps.end())
    steps = it->second;
  if (auto it = st.numbers.stats.find(label); it != st.numbers.stats.end())
    for (auto& m : it->second.metrics)
      if (m.name == metric_name::step)
        steps = std::max(steps, static_cast<uint64_t>(m.value));
  return steps;
}

// The global step: the trainers' steps summed over the replicas of the cut.
uint64_t global_step(const coordinator_state& st) {
  uint64_t sum = 0;
  for (auto& r : st.replicas)
    if (r.cut)
      sum += steps_of(st, r.label);
  return sum;
}

void finish_round(coordinator_self self, bool written) {
  auto& st = self->state;
  auto r = std::move(*st.ckpt.round);
  st.ckpt.round.reset();
  if (r.stop_after && written) {
    // The job ends at the cut: nothing after it is trained, so --resume
    // continues exactly there.
    spdlog::info("stopping at the checkpoint's cut");
    st.ckpt.halting = true;
    for (auto& rep : st.replicas)
      if (!rep.down)
        self->send_exit(rep.handle, caf::exit_reason::user_shutdown);
  } else {
    for (auto& h : r.paused)
      self->send(h, resume_atom::value, r.id);
    if (r.stop_after) // not written: stop the usual way (drain)
      for (auto& rep : st.replicas)
        if (!rep.down)
          self->send(rep.handle, stop_atom::value);
  }
  maybe_complete(self);
}

void write_round(coordinator_self self) {
  auto& st = self->state;
  auto& r = *st.ckpt.round;
  checkpoint c;
  c.step = r.job.step;
  c.parts.push_back({"job", format_job_part(r.job)});
  size_t bytes = 0;
  for (auto& [label, state] : r.states) {
    bytes += state.size();
    c.parts.push_back({label, std::move(state)});
  }
  for (auto& [label, state] : r.service_states) {
    bytes += state.size();
    c.parts.push_back({label, std::move(state)});
  }
  bool written = false;
  try {
    st.ckpt.checkpointing->store->write(c);
    written = true;
    ++st.ckpt.checkpoints;
    st.ckpt.last_checkpoint = st.ckpt.checkpointing->store->path_of(c.step);
    st.ckpt.last_checkpoint_step = c.step;
    st.ckpt.last_ended_written =
      r.states.empty()
      && std::all_of(r.job.ended.begin(), r.job.ended.end(),
                     [](auto& e) { return e.second; });
    auto ms =
      std::chrono::duration<double, std::milli>(clock_type::now() - r.began)
        .count();
    spdlog::info("checkpoint at step {} written to {} ({} parts, {:.1f} MiB, "
                 "{:.0f} ms)",
                 c.step, st.ckpt.last_checkpoint, c.parts.size(),
                 static_cast<double>(bytes) / (1 << 20), ms);
  } catch (const std::exception& ex) {
    // Older checkpoints are intact; training goes on.
    spdlog::error("checkpoint at step {} could not be written: {}", c.step,
                  ex.what());
  }
  finish_round(self, written);
}

// Called after every event of a round: once every replica answered, the
// services' snapshots are asked for; once they are in, it is written.
void check_round(coordinator_self self) {
  auto& st = self->state;
  if (!st.ckpt.round || !st.ckpt.round->waiting.empty())
    return;
  auto& r = *st.ckpt.round;
  if (r.services_asked)
    return;
  r.services_asked = true;
  r.services_left = st.services.size();
  if (r.services_left == 0) {
    write_round(self);
    return;
  }
  auto id = r.id;
  for (auto& [label, handle] : st.services) {
    auto name = label;
    self
      ->request(handle, std::chrono::seconds{60}, service_snapshot_atom::value)
      .then(
        [=](std::string& bytes) {
          auto& st = self->state;
          if (!st.ckpt.round || st.ckpt.round->id != id)
            return;
          st.ckpt.round->service_states[name] = std::move(bytes);
          if (--st.ckpt.round->services_left == 0)
            write_round(self);
        },
        [=](caf::error& err) {
          auto& st = self->state;
          if (st.ckpt.round && st.ckpt.round->id == id)
            abandon_round(
              self, name + " gave no snapshot: " + self->system().render(err));
        });
  }
}

} // namespace

void abandon_round(coordinator_self self, const std::string& why) {
  auto& st = self->state;
  spdlog::warn("checkpoint {} abandoned: {}; the job goes on", st.ckpt.round->id,
               why);
  finish_round(self, false);
}

// Starts checkpoint round: every replica of the cut still running is asked
// to cut its stream (final: none is, they all ended).
void begin_round(coordinator_self self, bool final, bool stop_after) {
  auto& st = self->state;
  checkpoint_round r;
  r.id = st.ckpt.next_checkpoint_id++;
  r.stop_after = stop_after;
  r.job.topology = st.ckpt.checkpointing->topology;
  for (auto& rep : st.replicas) {
    if (!rep.cut)
      continue;
    if (rep.done) {
      r.job.ended[rep.label] = true;
    } else if (rep.down) {
      r.job.lost.insert(rep.label);
    } else {
      r.waiting.insert(rep.label);
      self->send(rep.handle, checkpoint_atom::value, r.id);
    }
  }
  // Trainers that ended keep their steps in the global step.
  for (auto& [label, ended] : r.job.ended) {
    auto steps = steps_of(st, label);
    r.job.steps[label] = steps;
    r.job.step += steps;
  }
  spdlog::debug("checkpoint {}: cutting the stream ({} replicas)", r.id,
                r.waiting.size());
  st.ckpt.round = std::move(r);
  if (!final)
    self->delayed_send(self, st.ckpt.checkpointing->timeout,
                       checkpoint_timeout_atom::value, st.ckpt.round->id);
  check_round(self);
}

// A replica answered checkpoint `id`.
void on_cut(coordinator_self self, uint64_t id, const std::string& label,
            std::string& state, uint64_t step, bool ended) {
  auto& st = self->state;
  if (!st.ckpt.round || st.ckpt.round->id != id || !st.ckpt.round->waiting.erase(label)) {
    // A round given up (or another): the replica paused at its cut goes
    // on, or it would wait for resume_atom for good.
    if (!ended)
      if (auto sender = self->current_sender())
        self->send(caf::actor_cast<stage_actor>(sender), resume_atom::value,
                   id);
    return;
  }
  auto& r = *st.ckpt.round;
  r.job.ended[label] = ended;
  if (ended)
    step = steps_of(st, label);
  r.job.steps[label] = step;
  r.job.step += step;
  if (!ended) {
    r.states[label] = std::move(state);
    for (auto& rep : st.replicas)
      if (rep.label == label)
        r.paused.push_back(rep.handle);
  }
  check_round(self);
}

// A replica of the round ended (done) or went down before answering.
void round_lost(coordinator_self self, replica_entry& rep) {
  auto& st = self->state;
  if (!st.ckpt.round || !st.ckpt.round->waiting.erase(rep.label))
    return;
  auto& job = st.ckpt.round->job;
  if (rep.done) {
    auto steps = steps_of(st, rep.label);
    job.ended[rep.label] = true;
    job.steps[rep.label] = steps;
    job.step += steps;
  } else {
    job.lost.insert(rep.label);
  }
  check_round(self);
}

// Periodic checkpoints, by steps and by time; and the final one once every
// replica of the cut ended.
void maybe_checkpoint(coordinator_self self, bool timer) {
  auto& st = self->state;
  if (!checkpoints_on(st) || st.ckpt.round || st.ckpt.final_taken || st.stopped
      || !st.recovery.restoring.empty())
    return;
  bool all_ended = true;
  for (auto& r : st.replicas)
    if (r.cut && !r.done && !r.down)
      all_ended = false;
  if (all_ended) {
    st.ckpt.final_taken = true;
    // A periodic checkpoint may have found every replica ended already.
    if (st.ckpt.checkpointing->at_end && !st.ckpt.last_ended_written)
      begin_round(self, true, false);
    return;
  }
  auto& c = *st.ckpt.checkpointing;
  if (timer
      || (c.every_steps > 0
          && global_step(st) >= st.ckpt.last_checkpoint_step + c.every_steps))
    begin_round(self, false, false);
}

} // namespace af::detail
