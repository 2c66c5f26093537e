#include "runtime/job.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/sec.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>

#include <google/protobuf/text_format.h>
#include <spdlog/spdlog.h>

#include "runtime/census.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/credit.hpp"
#include "runtime/job_part.hpp"
#include "runtime/node.hpp"
#include "runtime/ps.hpp"
#include "runtime/stream.hpp"

namespace af {

namespace {

// The topology as text, for nodes (printed once, on first need).
const std::string& topology_text_of(const topology::Topology& spec,
                                    std::string& text) {
  if (text.empty())
    google::protobuf::TextFormat::PrintToString(spec, &text);
  return text;
}

using start_atom = caf::atom_constant<caf::atom("af_start")>;
using abort_atom = caf::atom_constant<caf::atom("af_abort")>;
using progress_atom = caf::atom_constant<caf::atom("af_progr")>;
using ckpt_tick_atom = caf::atom_constant<caf::atom("af_ctick")>;
using ckpt_timeout_atom = caf::atom_constant<caf::atom("af_ctime")>;
using restore_retry_atom = caf::atom_constant<caf::atom("af_rretry")>;

// How long restoring a lost service actor keeps trying its hosts (one
// round a second): long enough for a node restarted at the same address.
constexpr auto restore_patience = std::chrono::seconds{30};

using clock_type = std::chrono::steady_clock;

struct replica_entry {
  caf::actor handle;
  std::string label;
  std::string stage;
  bool may_fail = false; // stage_type::replicas_may_fail
  bool done = false;
  bool down = false;
  bool failed = false;
  bool cut = false; // takes part in checkpoints (not replayed on resume)
};

// What the coordinator needs to take checkpoints (topology.checkpoint).
struct ckpt_settings {
  std::unique_ptr<checkpoint_store> store; // null: no checkpoints
  uint64_t every_steps = 0;
  double every_s = 0;
  bool at_end = true;
  std::set<std::string> replayed; // stage names outside the cut
  std::string topology;
  std::chrono::milliseconds timeout{120000};
  // Set when the job resumed.
  std::string resumed_from;
  uint64_t resumed_step = 0;
  // Steps of the replicas that had ended at the resumed cut (they do not
  // report them again).
  std::map<std::string, uint64_t> resumed_steps;
};

// One checkpoint being taken.
struct ckpt_round {
  uint64_t id = 0;
  bool stop_after = false; // Ctrl-C: end the job at this cut
  std::set<std::string> waiting; // replicas that have not answered
  std::map<std::string, std::string> states;
  std::vector<caf::actor> paused; // to resume once written
  job_part job;
  bool services_asked = false;
  size_t services_left = 0;
  std::map<std::string, std::string> service_states;
  clock_type::time_point began = clock_type::now();
};

// Where the service actors placed on nodes run, and what starting one
// again elsewhere takes: restoring a lost parameter-server shard while the
// job runs (docs/multi-host.md). Filled by job::start before the
// coordinator is told to start.
struct service_home {
  std::string service; // "ps"
  uint32_t index = 0;
  std::vector<std::string> hosts; // the service's placement
  size_t host = 0;                // where in `hosts` it runs now
};

// What the coordinator needs to know of the topology to handle lost
// machines: where the services run and how to start them again, and which
// stages hand a lost replica's input to another (stage_type::reassignable)
// and who consumes them.
struct job_plan {
  std::map<std::string, service_home> by_label; // remote services only
  std::map<std::string, std::string> addresses; // host name -> HOST:PORT
  std::string topology_text;
  std::chrono::milliseconds connect_timeout{10000};
  std::set<std::string> reassignable; // stage names (with >1 replica)
  // one_to_one stages with >1 replica: a lost replica's unfinished items
  // go to the others (downstream_edge::resend).
  std::set<std::string> resent;
  std::map<std::string, std::vector<std::string>> consumers; // stage ->
  std::map<std::string, std::vector<std::string>> producers; // stage ->
};

// A service actor restored while the job ran, and the pushes lost with the
// old one (its workers' ps_lost_atom reports, summed).
struct restored_entry {
  std::string label;
  std::string text; // "ps[1] on host 'w1' from the checkpoint at step 400"
  uint64_t lost = 0;
};

// A lost service actor being started again from the last checkpoint.
struct restore_attempt {
  std::string why;
  std::vector<caf::response_promise> waiting; // ps_locate_atom requests
  std::string failures; // of the hosts tried in this round
  std::chrono::steady_clock::time_point began =
    std::chrono::steady_clock::now();
  bool retrying = false; // told the user it waits for a host
};

// What the coordinator is told at start: every replica and the service
// actors, in spawn order.
struct job_layout {
  std::vector<caf::actor> handles;
  std::vector<std::string> labels;
  std::vector<std::string> stages;
  std::vector<std::string> may_fail; // stage names
  std::vector<caf::actor> services;
  std::vector<std::string> service_labels;
};

// The job's result, delivered exactly once: by the coordinator when the job
// ends, or when the coordinator itself is killed (system shutdown).
struct result_slot {
  std::mutex mtx;
  bool set = false;
  std::promise<run_result> promise;
  caf::actor listener; // job_options::listener

  void deliver(run_result r) {
    std::lock_guard<std::mutex> guard{mtx};
    if (set)
      return;
    set = true;
    if (listener)
      caf::anon_send(listener, job_done_atom::value, r);
    promise.set_value(std::move(r));
  }
};

struct coordinator_state {
  job_options opts;
  std::shared_ptr<result_slot> result;
  std::vector<replica_entry> replicas;
  std::vector<std::pair<std::string, caf::actor>> services;
  std::vector<std::string> tolerated;
  bool started = false;
  bool stopped = false;
  std::string error;
  std::map<std::string, stage_stats> stats;
  // Histograms reported since the last progress snapshot.
  std::vector<histogram_summary> histograms;
  std::vector<scalar_event> scalars; // likewise
  clock_type::time_point begin = clock_type::now();
  std::shared_ptr<ckpt_settings> ckpt;
  std::optional<ckpt_round> round;
  uint64_t next_ckpt_id = 1;
  uint64_t last_ckpt_step = 0;
  bool final_taken = false;
  // Ending at a checkpoint's cut (Ctrl-C with checkpoints): replicas and
  // services go down on purpose.
  bool halting = false;
  uint64_t checkpoints = 0;
  std::string last_checkpoint;
  // Restoring lost service actors, reassigning lost sources' input.
  std::shared_ptr<job_plan> plan;
  // PS clients to tell when a shard is lost (ps_watch_atom).
  std::vector<caf::actor_addr> watchers;
  // Why no more checkpoints are taken ("" while they are).
  std::string no_more_checkpoints;
  std::map<std::string, restore_attempt> restoring;
  std::vector<restored_entry> restored;
  // The newest checkpoint written found every replica of the cut ended.
  bool last_ended_written = false;
};

using coordinator_actor = caf::stateful_actor<coordinator_state>;

// A replica's report: its histograms and step-stamped values wait for the
// next progress snapshot, its counters replace the previous report's.
void keep_stats(coordinator_state& st, stage_stats&& s) {
  for (auto& h : s.histograms)
    st.histograms.push_back(std::move(h));
  s.histograms.clear();
  for (auto& e : s.scalars) {
    e.name = s.stage_name + "/" + e.name;
    st.scalars.push_back(std::move(e));
  }
  s.scalars.clear();
  auto label = s.stage;
  st.stats[label] = std::move(s);
}

job_progress progress_of(coordinator_state& st) {
  job_progress p;
  p.elapsed_s =
    std::chrono::duration<double>(clock_type::now() - st.begin).count();
  // Stages in topology order (the order they were spawned in).
  for (auto& r : st.replicas) {
    auto it = st.stats.find(r.label);
    if (it == st.stats.end())
      continue;
    auto& s = it->second;
    if (s.is_sink) {
      p.items += s.items_in;
      p.records += s.records_in;
      p.bytes += s.bytes_in;
    }
    p.stages.push_back(s);
  }
  p.histograms = std::move(st.histograms);
  st.histograms.clear();
  p.scalars = std::move(st.scalars);
  st.scalars.clear();
  return p;
}

void kill_all(coordinator_actor* self) {
  for (auto& r : self->state.replicas)
    if (!r.down)
      self->send_exit(r.handle, caf::exit_reason::user_shutdown);
}

// The replica index in a label such as "train[1]".
uint32_t replica_of(const std::string& label) {
  auto open = label.rfind('[');
  return static_cast<uint32_t>(
    std::strtoul(label.c_str() + open + 1, nullptr, 10));
}

// Sends `msg...` to every running replica of `stage`.
template <class... Ts>
void tell_stage(coordinator_actor* self, const std::string& stage,
                const Ts&... msg) {
  for (auto& r : self->state.replicas)
    if (r.stage == stage && !r.down)
      self->send(r.handle, msg...);
}

// A failed replica of a stage that allows it is tolerated while another
// replica of the stage is running or ended normally.
bool tolerate(coordinator_actor* self, replica_entry& failed,
              const std::string& cause) {
  auto& st = self->state;
  if (failed.failed)
    return true; // already counted (stream_error, then down)
  if (!failed.may_fail)
    return false;
  for (auto& r : st.replicas)
    if (&r != &failed && r.stage == failed.stage && !r.failed
        && (!r.down || r.done)) {
      failed.failed = true;
      st.tolerated.push_back(failed.label + ": " + cause);
      spdlog::warn("{} failed ({}); the job goes on without it", failed.label,
                   cause);
      for (auto& [label, handle] : st.services)
        self->send(handle, replica_lost_atom::value, failed.stage,
                   replica_of(failed.label));
      return true;
    }
  return false;
}

void record_error(coordinator_actor* self, std::string message) {
  auto& st = self->state;
  if (!st.error.empty())
    return;
  st.error = std::move(message);
  spdlog::debug("job failed: {}", st.error);
  st.round.reset(); // a checkpoint being taken is abandoned
  auto failed = caf::make_error(caf::sec::runtime_error, st.error);
  for (auto& [label, r] : st.restoring)
    for (auto& rp : r.waiting)
      rp.deliver(failed);
  st.restoring.clear();
  kill_all(self);
}

void maybe_complete(coordinator_actor* self);

// --- checkpoints (docs/checkpoints.md) -------------------------------------

bool checkpoints_on(const coordinator_state& st) {
  return st.ckpt && st.ckpt->store && st.error.empty() && !st.halting
         && st.no_more_checkpoints.empty();
}

// A replica's steps: its metric "step" (trainers), or what it had when it
// ended before the cut the job resumed from.
uint64_t steps_of(const coordinator_state& st, const std::string& label) {
  uint64_t steps = 0;
  if (auto it = st.ckpt->resumed_steps.find(label);
      it != st.ckpt->resumed_steps.end())
    steps = it->second;
  if (auto it = st.stats.find(label); it != st.stats.end())
    for (auto& m : it->second.metrics)
      if (m.name == "step")
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

void finish_round(coordinator_actor* self, bool written) {
  auto& st = self->state;
  auto r = std::move(*st.round);
  st.round.reset();
  if (r.stop_after && written) {
    // The job ends at the cut: nothing after it is trained, so --resume
    // continues exactly there.
    spdlog::info("stopping at the checkpoint's cut");
    st.halting = true;
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

void write_round(coordinator_actor* self) {
  auto& st = self->state;
  auto& r = *st.round;
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
    st.ckpt->store->write(c);
    written = true;
    ++st.checkpoints;
    st.last_checkpoint = st.ckpt->store->path_of(c.step);
    st.last_ckpt_step = c.step;
    st.last_ended_written = r.states.empty()
                            && std::all_of(r.job.ended.begin(),
                                           r.job.ended.end(),
                                           [](auto& e) { return e.second; });
    auto ms = std::chrono::duration<double, std::milli>(clock_type::now()
                                                        - r.began)
                .count();
    spdlog::info("checkpoint at step {} written to {} ({} parts, {:.1f} MiB, "
                 "{:.0f} ms)",
                 c.step, st.last_checkpoint, c.parts.size(),
                 static_cast<double>(bytes) / (1 << 20), ms);
  } catch (const std::exception& ex) {
    // Older checkpoints are intact; training goes on.
    spdlog::error("checkpoint at step {} could not be written: {}", c.step,
                  ex.what());
  }
  finish_round(self, written);
}

void abandon_round(coordinator_actor* self, const std::string& why) {
  auto& st = self->state;
  spdlog::warn("checkpoint {} abandoned: {}; the job goes on", st.round->id,
               why);
  finish_round(self, false);
}

// Called after every event of a round: once every replica answered, the
// services' snapshots are asked for; once they are in, it is written.
void check_round(coordinator_actor* self) {
  auto& st = self->state;
  if (!st.round || !st.round->waiting.empty())
    return;
  auto& r = *st.round;
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
    self->request(handle, std::chrono::seconds{60}, ps_snapshot_atom::value)
      .then(
        [=](std::string& bytes) {
          auto& st = self->state;
          if (!st.round || st.round->id != id)
            return;
          st.round->service_states[name] = std::move(bytes);
          if (--st.round->services_left == 0)
            write_round(self);
        },
        [=](caf::error& err) {
          auto& st = self->state;
          if (st.round && st.round->id == id)
            abandon_round(self, name + " gave no snapshot: "
                                  + self->system().render(err));
        });
  }
}

// Starts checkpoint round: every replica of the cut still running is asked
// to cut its stream (final: none is, they all ended).
void begin_round(coordinator_actor* self, bool final, bool stop_after) {
  auto& st = self->state;
  ckpt_round r;
  r.id = st.next_ckpt_id++;
  r.stop_after = stop_after;
  r.job.topology = st.ckpt->topology;
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
  st.round = std::move(r);
  if (!final)
    self->delayed_send(self, st.ckpt->timeout, ckpt_timeout_atom::value,
                       st.round->id);
  check_round(self);
}

// A replica answered checkpoint `id`.
void on_cut(coordinator_actor* self, uint64_t id, const std::string& label,
            std::string& state, uint64_t step, bool ended) {
  auto& st = self->state;
  if (!st.round || st.round->id != id || !st.round->waiting.erase(label))
    return;
  auto& r = *st.round;
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
void round_lost(coordinator_actor* self, replica_entry& rep) {
  auto& st = self->state;
  if (!st.round || !st.round->waiting.erase(rep.label))
    return;
  auto& job = st.round->job;
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
void maybe_checkpoint(coordinator_actor* self, bool timer) {
  auto& st = self->state;
  if (!checkpoints_on(st) || st.round || st.final_taken || st.stopped
      || !st.restoring.empty())
    return;
  bool all_ended = true;
  for (auto& r : st.replicas)
    if (r.cut && !r.done && !r.down)
      all_ended = false;
  if (all_ended) {
    st.final_taken = true;
    // A periodic checkpoint may have found every replica ended already.
    if (st.ckpt->at_end && !st.last_ended_written)
      begin_round(self, true, false);
    return;
  }
  auto& c = *st.ckpt;
  if (timer
      || (c.every_steps > 0 && global_step(st) >= st.last_ckpt_step
                                                    + c.every_steps))
    begin_round(self, false, false);
}

// --- restoring a lost service actor (docs/multi-host.md) -------------------

bool can_restore(const coordinator_state& st, const std::string& label) {
  return st.plan && st.plan->by_label.count(label) && st.ckpt
         && st.ckpt->store;
}

void try_restore(coordinator_actor* self, const std::string& label,
                 size_t attempt);

void fail_restore(coordinator_actor* self, const std::string& label,
                  const std::string& why) {
  auto& st = self->state;
  auto it = st.restoring.find(label);
  if (it == st.restoring.end())
    return;
  auto lost = it->second.why;
  record_error(self, label + " went down (" + lost
                       + ") and could not be restored: " + why);
}

// The new actor of `label` runs on `host` with the slice of the checkpoint
// at `step` (or its initial values: no checkpoint yet): tell it which
// workers are gone, hand it to whoever asked, and go on with it.
void finish_restore(coordinator_actor* self, const std::string& label,
                    size_t host, caf::actor fresh, bool from_checkpoint,
                    uint64_t step) {
  auto& st = self->state;
  auto it = st.restoring.find(label);
  if (it == st.restoring.end() || !st.error.empty()) {
    self->send_exit(fresh, caf::exit_reason::user_shutdown);
    return;
  }
  auto waiting = std::move(it->second.waiting);
  st.restoring.erase(it);
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
  st.restored.push_back(restored_entry{label, std::move(line), 0});
  for (auto& rp : waiting)
    rp.deliver(fresh);
}

// The new actor is up: load the newest checkpoint's slice into it.
void load_restored(coordinator_actor* self, const std::string& label,
                   size_t host, caf::actor fresh, size_t attempt) {
  auto& st = self->state;
  std::optional<checkpoint> c;
  try {
    c = st.ckpt->store->latest();
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
  auto where = st.ckpt->store->path_of(c->step);
  if (bytes == nullptr) {
    self->send_exit(fresh, caf::exit_reason::user_shutdown);
    fail_restore(self, label, where + " has no part for it");
    return;
  }
  auto step = c->step;
  self->request(fresh, std::chrono::seconds{60}, ps_restore_atom::value, *bytes)
    .then(
      [=](uint64_t) { finish_restore(self, label, host, fresh, true, step); },
      [=](caf::error& err) {
        self->send_exit(fresh, caf::exit_reason::user_shutdown);
        auto& st = self->state;
        if (auto it = st.restoring.find(label); it != st.restoring.end()) {
          it->second.failures += "; host '"
                                 + st.plan->by_label[label].hosts[host]
                                 + "': loading " + where + ": "
                                 + self->system().render(err);
          try_restore(self, label, attempt + 1);
        }
      });
}

// Starts `label` on the next host of its placement: the other hosts
// first, its own last (a node restarted at the same address).
void try_restore(coordinator_actor* self, const std::string& label,
                 size_t attempt) {
  auto& st = self->state;
  auto it = st.restoring.find(label);
  if (it == st.restoring.end() || !st.error.empty())
    return;
  auto& home = st.plan->by_label[label];
  auto n = home.hosts.size();
  auto& r = it->second;
  if (attempt == 0)
    r.failures.clear();
  if (attempt >= n) {
    auto why = "no host could take it (" + r.failures.substr(2) + ")";
    if (clock_type::now() - r.began >= restore_patience) {
      fail_restore(self, label, why + " for "
                                  + std::to_string(restore_patience.count())
                                  + " s");
      return;
    }
    if (!r.retrying)
      spdlog::warn("{}: {}; trying again every second for {} s", label, why,
                   restore_patience.count());
    r.retrying = true;
    self->delayed_send(self, std::chrono::seconds{1},
                       restore_retry_atom::value, label);
    return;
  }
  auto host = (home.host + 1 + attempt) % n;
  auto name = home.hosts[host];
  auto address = st.plan->addresses[name];
  auto next = [=](const std::string& why) {
    auto& st = self->state;
    if (auto it = st.restoring.find(label); it != st.restoring.end()) {
      it->second.failures += "; host '" + name + "' (" + address + "): " + why;
      try_restore(self, label, attempt + 1);
    }
  };
  auto parsed = parse_address(address);
  if (!parsed) {
    next("not a HOST:PORT address");
    return;
  }
  auto& sys = self->system();
  auto mm = sys.has_openssl_manager() ? sys.openssl_manager().actor_handle()
                                      : sys.middleman().actor_handle();
  if (r.retrying)
    spdlog::debug("restoring {} on host '{}' ({})", label, name, address);
  else
    spdlog::info("restoring {} on host '{}' ({})", label, name, address);
  self
    ->request(mm, st.plan->connect_timeout, caf::connect_atom::value,
              parsed->host, parsed->port)
    .then(
      [=](caf::node_id&, caf::strong_actor_ptr& ptr, std::set<std::string>&) {
        if (!ptr) {
          next("no spawner published there");
          return;
        }
        auto& st = self->state;
        auto& home = st.plan->by_label[label];
        self
          ->request(caf::actor_cast<caf::actor>(ptr), std::chrono::seconds{60},
                    spawn_service_atom::value, st.plan->topology_text,
                    home.service, home.index,
                    caf::actor_cast<caf::actor>(self))
          .then(
            [=](caf::actor& fresh) {
              load_restored(self, label, host, std::move(fresh), attempt);
            },
            [=](caf::error& err) { next(self->system().render(err)); });
      },
      [=](caf::error& err) { next(self->system().render(err)); });
}

// Replica `lost` of a one_to_one stage with other replicas went down: its
// producers send what it had not finished to the others, its consumers
// close its edge. False when no replica of the stage is left running.
bool resend_lost(coordinator_actor* self, replica_entry& lost,
                 const std::string& why) {
  auto& st = self->state;
  if (!st.plan || !st.plan->resent.count(lost.stage))
    return false;
  auto alive = std::any_of(st.replicas.begin(), st.replicas.end(),
                           [&](auto& r) {
                             return &r != &lost && r.stage == lost.stage
                                    && !r.down && !r.done && !r.failed;
                           });
  if (!alive)
    return false;
  lost.failed = true;
  for (auto& producer : st.plan->producers[lost.stage])
    tell_stage(self, producer, output_lost_atom::value, lost.label);
  for (auto& consumer : st.plan->consumers[lost.stage])
    tell_stage(self, consumer, input_lost_atom::value, lost.label);
  st.tolerated.push_back(lost.label + ": " + why
                         + "; its unfinished items went to the other "
                           "replicas");
  spdlog::warn("{} went down ({}); its unfinished items go to the other "
               "replicas of {}",
               lost.label, why, lost.stage);
  // Items sent again now come after the barrier of a checkpoint being
  // taken, while they were read before its cut.
  if (st.round)
    abandon_round(self, lost.label + " was lost");
  return true;
}

// Replica `lost` of a reassignable source stage went down: a surviving
// replica takes over its share and its consumers close its edge. False
// when no replica of the stage is left running to take it.
bool reassign(coordinator_actor* self, replica_entry& lost,
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
  if (auto it = st.stats.find(lost.label); it != st.stats.end())
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
  if (st.ckpt && st.ckpt->store && st.no_more_checkpoints.empty()) {
    // A checkpoint now could not say which replica reads what.
    st.no_more_checkpoints = lost.label + "'s input was reassigned";
    spdlog::warn("no more checkpoints in this job: {}; --resume would "
                 "continue from the last one before",
                 st.no_more_checkpoints);
    if (st.round)
      abandon_round(self, st.no_more_checkpoints);
  }
  return true;
}

// Service actor `label` went down while the job runs.
void service_lost(coordinator_actor* self, const std::string& label,
                  const std::string& why) {
  auto& st = self->state;
  // Its clients stop waiting for its answers at once.
  for (auto& addr : st.watchers)
    if (auto client = caf::actor_cast<caf::actor>(addr))
      self->send(client, ps_gone_atom::value, label);
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
  if (st.round)
    abandon_round(self, label + " went down");
  st.restoring[label].why = why;
  try_restore(self, label, 0);
}

void maybe_complete(coordinator_actor* self) {
  auto& st = self->state;
  if (!st.started || st.round)
    return;
  for (auto& r : st.replicas)
    if (!r.down)
      return;
  // Services live as long as some stage does.
  for (auto& [label, handle] : st.services)
    self->send_exit(handle, caf::exit_reason::user_shutdown);
  auto ended = caf::make_error(caf::sec::request_receiver_down,
                               "the job has ended");
  for (auto& [label, r] : st.restoring)
    for (auto& rp : r.waiting)
      rp.deliver(ended);
  run_result result;
  result.ok = st.error.empty();
  result.stopped = st.stopped;
  result.error = st.error;
  result.tolerated_failures = st.tolerated;
  for (auto& r : st.restored)
    result.restored.push_back(r.text + ": " + std::to_string(r.lost)
                              + " steps lost");
  result.final = progress_of(st);
  result.checkpoints = st.checkpoints;
  result.last_checkpoint = st.last_checkpoint;
  if (st.ckpt) {
    result.resumed_from = st.ckpt->resumed_from;
    result.resumed_step = st.ckpt->resumed_step;
  }
  st.result->deliver(std::move(result));
  self->quit();
}

caf::behavior coordinator_main(coordinator_actor* self, job_options opts,
                               std::shared_ptr<result_slot> result,
                               std::shared_ptr<ckpt_settings> ckpt,
                               std::shared_ptr<job_plan> plan) {
  self->state.opts = std::move(opts);
  self->state.plan = std::move(plan);
  self->state.result = result;
  self->state.ckpt = ckpt;
  self->state.last_ckpt_step = ckpt->resumed_step;
  self->attach_functor([result](const caf::error& reason) {
    // Only reached with a result still missing if the coordinator was
    // killed: waiters must not hang.
    run_result r;
    r.error = "the job's coordinator exited: "
              + (reason ? caf::to_string(reason) : std::string{"normal"});
    result->deliver(std::move(r));
  });
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& st = self->state;
    for (auto& r : st.replicas)
      if (!r.down && r.handle.address() == dm.source) {
        r.down = true;
        round_lost(self, r);
        if (!r.done && st.error.empty() && !st.halting) {
          auto reason = dm.reason ? caf::to_string(dm.reason)
                                  : std::string{"exited before its end of "
                                                "stream"};
          if (!tolerate(self, r, reason) && !reassign(self, r, reason)
              && !resend_lost(self, r, reason))
            record_error(self, "stage " + r.label + " went down: " + reason
                                 + (st.plan->reassignable.count(r.stage)
                                        || st.plan->resent.count(r.stage)
                                      ? " (and no other replica of the "
                                        "stage is left to take over its "
                                        "work)"
                                      : ""));
        }
      }
    std::vector<std::string> lost;
    for (auto& [label, handle] : st.services)
      if (handle.address() == dm.source && st.error.empty() && !st.halting
          && !st.restoring.count(label)) {
        bool ending = std::all_of(st.replicas.begin(), st.replicas.end(),
                                  [](auto& r) { return r.down; });
        if (!ending)
          lost.push_back(label);
      }
    for (auto& label : lost)
      service_lost(self, label,
                   dm.reason ? caf::to_string(dm.reason)
                             : std::string{"exited"});
    maybe_checkpoint(self, false);
    maybe_complete(self);
  });
  return {
    [=](start_atom, const std::vector<caf::actor>& handles,
        const std::vector<std::string>& labels,
        const std::vector<std::string>& stages,
        const std::vector<std::string>& may_fail,
        const std::vector<caf::actor>& services,
        const std::vector<std::string>& service_labels) {
      auto& st = self->state;
      job_layout l{handles, labels, stages, may_fail, services,
                   service_labels};
      for (size_t i = 0; i < l.handles.size(); ++i) {
        replica_entry r;
        r.handle = l.handles[i];
        r.label = l.labels[i];
        r.stage = l.stages[i];
        r.may_fail = std::find(l.may_fail.begin(), l.may_fail.end(), r.stage)
                     != l.may_fail.end();
        r.cut = st.ckpt->replayed.count(r.stage) == 0;
        st.replicas.push_back(std::move(r));
        self->monitor(l.handles[i]);
      }
      for (size_t i = 0; i < l.services.size(); ++i) {
        st.services.emplace_back(l.service_labels[i], l.services[i]);
        self->monitor(l.services[i]);
      }
      st.started = true;
      st.begin = clock_type::now();
      if (st.opts.on_progress || st.opts.listener)
        self->delayed_send(self, st.opts.progress_interval,
                           progress_atom::value);
      if (st.ckpt->store && st.ckpt->every_s > 0)
        self->delayed_send(
          self,
          std::chrono::milliseconds{
            static_cast<int64_t>(st.ckpt->every_s * 1000)},
          ckpt_tick_atom::value);
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
        uint64_t step, bool ended) {
      on_cut(self, id, label, state, step, ended);
    },
    [=](ckpt_tick_atom) {
      auto& st = self->state;
      maybe_checkpoint(self, true);
      self->delayed_send(self,
                         std::chrono::milliseconds{static_cast<int64_t>(
                           st.ckpt->every_s * 1000)},
                         ckpt_tick_atom::value);
    },
    [=](ckpt_timeout_atom, uint64_t id) {
      auto& st = self->state;
      if (!st.round || st.round->id != id)
        return;
      std::string who;
      for (auto& label : st.round->waiting)
        who += (who.empty() ? "" : ", ") + label;
      abandon_round(self, "no cut after "
                            + std::to_string(st.ckpt->timeout.count())
                            + " ms (waiting for "
                            + (who.empty() ? "the services" : who) + ")");
    },
    [=](const stream_error& err) {
      if (self->state.halting)
        return;
      for (auto& r : self->state.replicas)
        if (r.label == err.stage && !err.bad_input
            && tolerate(self, r, err.cause))
          return;
      record_error(self, "stage " + err.stage + " failed: " + err.cause);
    },
    [=](stop_atom) {
      auto& st = self->state;
      if (checkpoints_on(st) && !st.final_taken && !st.stopped) {
        // Take a checkpoint and end at its cut.
        st.stopped = true;
        if (st.round)
          st.round->stop_after = true;
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
    },
    [=](abort_atom, const std::string& reason) { record_error(self, reason); },
    [=](ps_watch_atom) {
      self->state.watchers.push_back(
        caf::actor_cast<caf::actor_addr>(self->current_sender()));
    },
    [=](restore_retry_atom, const std::string& label) {
      try_restore(self, label, 0);
    },
    [=](ps_lost_atom, const std::string& label, uint32_t worker,
        uint64_t pushes) {
      auto& st = self->state;
      for (auto r = st.restored.rbegin(); r != st.restored.rend(); ++r)
        if (r->label == label) {
          r->lost += pushes;
          spdlog::warn("{}: {} steps of worker {} lost with the old one ({} "
                       "in all)",
                       label, pushes, worker, r->lost);
          return;
        }
    },
    // The answer is the current actor: the asker's own while it is not
    // known to be lost here.
    [=](ps_locate_atom, const std::string& label) -> caf::result<caf::actor> {
      auto& st = self->state;
      if (!st.error.empty())
        return caf::make_error(caf::sec::runtime_error, st.error);
      auto it = std::find_if(st.services.begin(), st.services.end(),
                             [&](auto& s) { return s.first == label; });
      if (it == st.services.end())
        return caf::make_error(caf::sec::invalid_argument,
                               "the job has no service actor " + label);
      auto r = st.restoring.find(label);
      if (r == st.restoring.end())
        return it->second;
      auto rp = self->make_response_promise<caf::actor>();
      r->second.waiting.push_back(rp);
      return rp;
    },
    [=](progress_atom) {
      auto& st = self->state;
      auto p = progress_of(st);
      if (st.opts.listener)
        self->send(st.opts.listener, job_progress_atom::value, p);
      if (st.opts.on_progress)
        st.opts.on_progress(p);
      self->delayed_send(self, st.opts.progress_interval, progress_atom::value);
    },
  };
}

} // namespace

job job::start(caf::actor_system& sys, const loaded_topology& topo,
               const registry& reg, job_options opts) {
  job result;
  auto slot = std::make_shared<result_slot>();
  slot->listener = opts.listener;
  // For the context below (opts moves into the coordinator first).
  auto outlets = opts.outlets;
  result.result_ = slot->promise.get_future().share();
  auto& spec = topo.spec;
  auto interval = std::chrono::milliseconds{
    static_cast<int64_t>(1000
                         * (spec.runtime().has_metrics_interval_s()
                              ? spec.runtime().metrics_interval_s()
                              : default_metrics_interval_s))};
  if (interval.count() < 1)
    interval = std::chrono::milliseconds{1};
  // Progress is reported no more often than stages report their stats.
  if (opts.progress_interval < interval)
    opts.progress_interval = interval;
  auto connect_timeout = opts.connect_timeout;

  // Checkpoints: the settings, and the checkpoint to resume from.
  auto ckpt = std::make_shared<ckpt_settings>();
  ckpt->topology = spec.name();
  ckpt->timeout = opts.checkpoint_timeout;
  std::optional<checkpoint> resume_from;
  job_part resumed;
  std::map<std::string, const std::string*> resume_parts;
  std::string resume_where;
  if (spec.has_checkpoint()) {
    auto& c = spec.checkpoint();
    ckpt->store = std::make_unique<checkpoint_store>(
      c.dir(), c.has_keep() ? static_cast<size_t>(c.keep()) : 3);
    ckpt->every_steps = static_cast<uint64_t>(c.every_steps());
    ckpt->every_s = c.every_seconds();
    ckpt->at_end = !c.has_at_end() || c.at_end();
    auto replayed = replayed_stages(spec, reg);
    for (int i = 0; i < spec.stage_size(); ++i)
      if (replayed[static_cast<size_t>(i)])
        ckpt->replayed.insert(spec.stage(i).name());
    if (opts.resume) {
      resume_from = ckpt->store->latest();
      if (!resume_from) {
        spdlog::info("--resume: no complete checkpoint in {} yet; starting "
                     "from the beginning",
                     c.dir());
      } else {
        resume_where = ckpt->store->path_of(resume_from->step);
        for (auto& p : resume_from->parts)
          resume_parts[p.name] = &p.bytes;
        if (!resume_parts.count("job"))
          throw std::runtime_error(resume_where + ": no job part");
        resumed = parse_job_part(*resume_parts["job"], resume_where);
        std::set<std::string> cut_labels;
        for (int i = 0; i < spec.stage_size(); ++i) {
          auto& s = spec.stage(i);
          if (ckpt->replayed.count(s.name()))
            continue;
          for (int r = 0; r < replicas_of(s); ++r)
            cut_labels.insert(s.name() + "[" + std::to_string(r) + "]");
        }
        auto known = [&](const std::string& label) {
          if (!cut_labels.count(label))
            throw std::runtime_error(
              resume_where + " holds stage replica '" + label
              + "', which this topology does not have (or replays): a job "
                "resumes with the stages and replica counts it was "
                "checkpointed with");
        };
        for (auto& [label, ended] : resumed.ended) {
          known(label);
          if (!ended && !resume_parts.count(label))
            throw std::runtime_error(resume_where + ": the part of '" + label
                                     + "' is missing");
        }
        for (auto& label : resumed.lost)
          known(label);
        for (auto& label : cut_labels) {
          if (resumed.lost.count(label))
            spdlog::warn("{} was lost before the checkpoint was taken; it "
                         "starts afresh",
                         label);
          else if (!resumed.ended.count(label))
            throw std::runtime_error(
              resume_where + " does not know stage replica '" + label
              + "': a job resumes with the stages and replica counts it was "
                "checkpointed with");
        }
        for (auto& [label, ended] : resumed.ended)
          if (ended)
            ckpt->resumed_steps[label] = resumed.steps[label];
        ckpt->resumed_from = resume_where;
        ckpt->resumed_step = resumed.step;
        result.resumed_step_ = resumed.step;
        spdlog::info("resuming from {} (step {})", resume_where,
                     resumed.step);
      }
    }
  } else if (opts.resume) {
    throw std::runtime_error("--resume needs checkpoints: the topology has "
                             "no checkpoint { dir: ... } section");
  }

  auto plan = std::make_shared<job_plan>();
  plan->connect_timeout = connect_timeout;
  for (auto& h : spec.host())
    plan->addresses[h.name()] = h.address();
  for (auto& s : spec.stage()) {
    auto* type = reg.find(s.type());
    if (type != nullptr && type->reassignable && replicas_of(s) > 1)
      plan->reassignable.insert(s.name());
    if (type != nullptr && type->one_to_one && replicas_of(s) > 1
        && s.input_size() > 0)
      plan->resent.insert(s.name());
    for (auto& in : s.input()) {
      plan->consumers[in.stage()].push_back(s.name());
      plan->producers[s.name()].push_back(in.stage());
    }
  }
  result.coordinator_ =
    sys.spawn(coordinator_main, std::move(opts), slot, ckpt, plan);
  census_add(result.coordinator_, "coordinator");

  std::vector<std::vector<caf::actor>> replicas(spec.stage_size());
  std::vector<caf::actor> handles;
  std::vector<std::string> labels, stages, may_fail, service_labels;
  std::vector<caf::actor> service_handles;
  auto kill_spawned = [&] {
    for (auto& h : handles)
      caf::anon_send_exit(h, caf::exit_reason::user_shutdown);
    for (auto& h : service_handles)
      caf::anon_send_exit(h, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(result.coordinator_, caf::exit_reason::user_shutdown);
  };

  // Nodes, connected on first use: host name -> its spawner.
  std::map<std::string, caf::actor> spawners;
  std::string topology_text;
  caf::scoped_actor self{sys};
  auto spawner_for = [&](const std::string& host) -> caf::actor {
    if (auto it = spawners.find(host); it != spawners.end())
      return it->second;
    std::string address;
    for (auto& h : spec.host())
      if (h.name() == host)
        address = h.address();
    auto where = "host '" + host + "' (" + address + ")";
    auto parsed = parse_address(address);
    if (!parsed)
      throw std::runtime_error(where + ": not a HOST:PORT address");
    if (!sys.has_middleman())
      throw std::runtime_error(where + ": this actor system has no network "
                                       "(load caf::io::middleman)");
    // What remote_actor does, with a time limit: through the OpenSSL
    // module's middleman actor when the system has one (TLS with mutual
    // certificate checks), else the plain one.
    bool tls = sys.has_openssl_manager();
    auto mm = tls ? sys.openssl_manager().actor_handle()
                  : sys.middleman().actor_handle();
    caf::actor spawner;
    caf::error failure;
    // A handshake that CAF gave up on (middleman.connection-timeout) is
    // tried again while the connect timeout lasts: a node's only I/O
    // thread can be busy for seconds after garbage on its port (CAF 0.17
    // zero-fills a receive buffer of whatever size a garbage header
    // claims, up to 4 GiB), and a later try then gets through.
    auto deadline = std::chrono::steady_clock::now() + connect_timeout;
    for (int attempt = 1;; ++attempt) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
      failure = caf::error{};
      self
        ->request(mm, std::max(left, std::chrono::milliseconds{1}),
                  caf::connect_atom::value, parsed->host, parsed->port)
        .receive(
          [&](caf::node_id&, caf::strong_actor_ptr& ptr,
              std::set<std::string>&) {
            if (ptr)
              spawner = caf::actor_cast<caf::actor>(std::move(ptr));
            else
              failure = caf::sec::no_actor_published_at_port;
          },
          [&](caf::error& err) { failure = std::move(err); });
      if (failure != caf::sec::connection_timeout
          || std::chrono::steady_clock::now() + std::chrono::milliseconds{100}
               >= deadline)
        break;
      spdlog::warn("{}: no CAF handshake on attempt {} ({}); trying again "
                   "({} ms of the connect timeout left)",
                   where, attempt, sys.render(failure),
                   std::chrono::duration_cast<std::chrono::milliseconds>(
                     deadline - std::chrono::steady_clock::now())
                     .count());
    }
    if (failure) {
      auto why = sys.render(failure);
      // No TCP connection at all: CAF names the failed ip_connect.
      bool no_tcp = failure == caf::sec::cannot_connect_to_node
                    && !failure.context().empty();
      // A peer that accepts and then says nothing: CAF's own handshake
      // timeout (middleman.connection-timeout), else ours.
      if (failure == caf::sec::request_timeout
          || failure == caf::sec::connection_timeout)
        throw std::runtime_error(
          where + " accepted the connection but did not complete the "
          + (tls ? "TLS" : "CAF") + " handshake: "
          + (failure == caf::sec::request_timeout
               ? "no answer within " + std::to_string(connect_timeout.count())
                   + " ms"
               : why)
          + " (is it a running `actorflow node`"
          + (tls ? " with --tls-cert/--tls-key/--tls-ca?)" : "?)"));
      if (tls && !no_tcp)
        throw std::runtime_error(
          where + " refused the TLS connection: " + why
          + " (the node must run with --tls-cert/--tls-key/--tls-ca, and "
            "each side's certificate must be signed by a CA in the other "
            "side's --tls-ca and not expired)");
      if (!tls && failure == caf::sec::disconnect_during_handshake)
        throw std::runtime_error(
          where + " closed the connection during the handshake: " + why
          + " (does the node require TLS? then run with "
            "--tls-cert/--tls-key/--tls-ca too)");
      throw std::runtime_error(where + " is unreachable: " + why
                               + " (is `actorflow node --listen " + address
                               + "` running there?)");
    }
    spawners.emplace(host, spawner);
    return spawner;
  };
  // Asks a node to create an actor; the answer is its handle.
  auto remote = [&](const std::string& host, const std::string& what,
                    auto... request) {
    auto spawner = spawner_for(host);
    caf::actor handle;
    self->request(spawner, std::chrono::seconds{60}, request...)
      .receive([&](caf::actor& a) { handle = std::move(a); },
               [&](caf::error& err) {
                 throw std::runtime_error(what + " on host '" + host
                                          + "': " + sys.render(err));
               });
    return handle;
  };

  // Services first: stages reach them from their factories.
  auto context = std::make_shared<job_context>();
  context->system = &sys;
  context->topology = std::make_shared<const topology::Topology>(spec);
  context->coordinator = result.coordinator_;
  context->outlets = std::move(outlets);
  std::vector<std::string> service_of; // flattened, for remote stages
  try {
    for (auto& service : reg.services()) {
      auto count = service.count(spec);
      auto hosts = service.hosts ? service.hosts(spec)
                                 : std::vector<std::string>{};
      std::vector<caf::actor> actors;
      for (uint32_t k = 0; k < count; ++k) {
        auto label = service.name + "[" + std::to_string(k) + "]";
        caf::actor a;
        try {
          if (hosts.empty())
            a = service.spawn(sys, spec, k);
          else
            a = remote(hosts[k % hosts.size()], label, spawn_service_atom::value,
                       topology_text_of(spec, topology_text), service.name, k,
                       result.coordinator_);
        } catch (const std::exception& ex) {
          throw std::runtime_error(label + ": cannot start: " + ex.what());
        }
        actors.push_back(a);
        service_handles.push_back(a);
        if (!hosts.empty()) {
          plan->topology_text = topology_text_of(spec, topology_text);
          plan->by_label[label] =
            service_home{service.name, k, hosts, k % hosts.size()};
        }
        if (resume_from) {
          auto it = resume_parts.find(label);
          if (it == resume_parts.end()) {
            caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
            throw std::runtime_error(resume_where + " has no part for "
                                     + label);
          }
          std::string failure;
          self
            ->request(a, std::chrono::seconds{60}, ps_restore_atom::value,
                      *it->second)
            .receive([](uint64_t) {},
                     [&](caf::error& err) { failure = sys.render(err); });
          if (!failure.empty())
            throw std::runtime_error("cannot restore from " + resume_where
                                     + ": " + failure);
        }
        service_labels.push_back(label);
        service_of.push_back(service.name);
      }
      if (count > 0)
        context->services[service.name] = std::move(actors);
    }

    // Spawn every replica, stage by stage.
    for (int i = 0; i < spec.stage_size(); ++i) {
      auto& s = spec.stage(i);
      auto* type = reg.find(s.type());
      auto n = static_cast<uint32_t>(replicas_of(s));
      for (uint32_t r = 0; r < n; ++r) {
        auto label = s.name() + "[" + std::to_string(r) + "]";
        caf::actor handle;
        if (s.hosts_size() == 0)
          handle = spawn_replica(sys, reg, spec, i, r, context,
                                 result.coordinator_);
        else
          handle = remote(s.hosts(static_cast<int>(r % s.hosts_size())),
                          "stage " + label, spawn_stage_atom::value,
                          topology_text_of(spec, topology_text),
                          static_cast<uint32_t>(i), r, result.coordinator_,
                          service_of, service_handles);
        labels.push_back(label);
        stages.push_back(s.name());
        if (r == 0 && type->replicas_may_fail)
          may_fail.push_back(s.name());
        handles.push_back(handle);
        replicas[i].push_back(handle);
        result.replicas_.emplace_back(label, handle);
      }
    }
  } catch (const std::exception&) {
    kill_spawned();
    throw;
  }
  caf::anon_send(result.coordinator_, start_atom::value, handles, labels,
                 stages, may_fail, service_handles, service_labels);

  // Wire the edges: every producer replica to every consumer replica.
  std::map<std::string, int> index;
  for (int i = 0; i < spec.stage_size(); ++i)
    index[spec.stage(i).name()] = i;
  std::vector<std::vector<wiring>> per_replica(spec.stage_size());
  for (int i = 0; i < spec.stage_size(); ++i)
    per_replica[i].resize(replicas[i].size());
  for (int i = 0; i < spec.stage_size(); ++i) {
    auto& s = spec.stage(i);
    for (auto& in : s.input()) {
      int p = index.at(in.stage());
      for (size_t pr = 0; pr < replicas[p].size(); ++pr) {
        auto pname = in.stage() + "[" + std::to_string(pr) + "]";
        for (size_t cr = 0; cr < replicas[i].size(); ++cr) {
          auto cname = s.name() + "[" + std::to_string(cr) + "]";
          per_replica[i][cr].upstreams.push_back(upstream_edge{
            replicas[p][pr], pname, static_cast<uint64_t>(window_of(in)),
            static_cast<uint64_t>(in.byte_budget()),
            plan->reassignable.count(in.stage()) > 0
              || plan->resent.count(in.stage()) > 0,
            plan->resent.count(s.name()) > 0});
          per_replica[p][pr].downstreams.push_back(downstream_edge{
            replicas[i][cr], cname, plan->resent.count(s.name()) > 0});
        }
      }
    }
  }
  for (int i = 0; i < spec.stage_size(); ++i)
    for (size_t r = 0; r < replicas[i].size(); ++r) {
      // A resumed job: each replica of the cut gets its state first (the
      // same sender, so it arrives before the wiring).
      if (resume_from && !ckpt->replayed.count(spec.stage(i).name())) {
        auto label = spec.stage(i).name() + "[" + std::to_string(r) + "]";
        auto it = resumed.ended.find(label);
        bool ended = it != resumed.ended.end() && it->second;
        std::string state;
        if (it != resumed.ended.end() && !ended)
          state = *resume_parts[label];
        caf::anon_send(replicas[i][r], restore_atom::value, std::move(state),
                       ended);
      }
      caf::anon_send(replicas[i][r], wire_atom::value, per_replica[i][r]);
    }
  return result;
}

void job::stop() const {
  caf::anon_send(coordinator_, stop_atom::value);
}

void job::abort(const std::string& reason) const {
  caf::anon_send(coordinator_, abort_atom::value, reason);
}

run_result job::wait() {
  return result_.get();
}

std::optional<run_result> job::wait_for(std::chrono::milliseconds timeout) {
  if (result_.wait_for(timeout) != std::future_status::ready)
    return std::nullopt;
  return result_.get();
}

} // namespace af
