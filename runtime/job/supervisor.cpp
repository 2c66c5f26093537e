// The job supervisor (runtime/job/supervisor.hpp): autotune, the start and
// its retries, interrupts, and starting the job again after a lost node.
#include "actorflow/runtime/job/supervisor.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <thread>

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include "actorflow/runtime/job/autotune.hpp"
#include "actorflow/runtime/job/relocate.hpp"

namespace af {

namespace {

// How long a job whose node was lost waits for a placement (a host of
// every stage's answering), and how long one host may take to answer.
constexpr auto restart_patience = std::chrono::seconds{30};
constexpr auto probe_timeout = std::chrono::seconds{2};

// A job started again after a lost node: what the summary says of it, and
// the earlier attempts' lines.
struct restarts {
  int count = 0;
  std::chrono::steady_clock::time_point first_start =
    std::chrono::steady_clock::now();
  std::vector<std::string> lines;
  std::vector<std::string> tolerated;
  std::vector<std::string> restored;
  std::vector<std::string> joined;
};

// Whether an interrupt was asked for.
bool interrupted(const supervise_options& o) {
  return o.interrupts && o.interrupts() > 0;
}

// The steps the trainers had reached by their last counts: the sum of
// every stage's "step" metric (trainers report it).
double trainer_steps(const job_progress& p, bool& training) {
  double steps = 0;
  for (auto& s : p.stages)
    for (auto& m : s.metrics)
      if (m.name == metric_name::step) {
        training = true;
        steps += m.value;
      }
  return steps;
}

// The checkpoint a job that ended with `r` continues from, as (step,
// path): the newest it wrote, else the one it resumed from; none
// (nullopt): the beginning.

std::optional<std::pair<uint64_t, std::string>>
restart_point(const run_result& r) {
  if (r.checkpoints > 0)
    return std::pair{r.last_checkpoint_step, r.last_checkpoint};
  if (!r.resumed_from.empty())
    return std::pair{r.resumed_step, r.resumed_from};
  return std::nullopt;
}

// `original` placed on the hosts that answer now (every host of it, once a
// lost node is back); waits while some stage has no host left, 30 s at
// most. nullopt, with why in `why`, when time ran out or an interrupt came.
std::optional<loaded_topology> placement_now(caf::actor_system& sys,
                                             const loaded_topology& original,
                                             const supervise_options& o,
                                             std::string& why) {
  auto deadline = std::chrono::steady_clock::now() + restart_patience;
  bool waiting = false;
  for (;;) {
    auto down = unreachable_hosts(sys, original.spec, probe_timeout);
    std::set<std::string> names;
    for (auto& [host, problem] : down) {
      names.insert(host);
      spdlog::debug("restart: {}", problem);
    }
    if (auto spec = place_without(original.spec, names, why)) {
      auto placed = original;
      placed.spec = std::move(*spec);
      return placed;
    }
    if (interrupted(o)) {
      why += "; interrupted";
      return std::nullopt;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      why += " for " + std::to_string(restart_patience.count()) + " s";
      return std::nullopt;
    }
    if (!waiting)
      spdlog::warn("restart: {}; trying again every second for {} s", why,
                   restart_patience.count());
    waiting = true;
    std::this_thread::sleep_for(std::chrono::seconds{1});
  }
}

// After a job that ended with `res`: the topology to start it again with
// (and `jopts` set to resume from its checkpoint), or nullopt when it is
// not to be started again (it did not fail for a lost node, it was
// interrupted (`stopped`, set when an interrupt comes meanwhile),
// max_restarts were used up, or no placement was found: `res.error` then
// says why). Adds the summary's line to `r`.
std::optional<loaded_topology>
restart_after(caf::actor_system& sys, const registry& reg,
              const loaded_topology& original, const loaded_topology& last,
              const supervise_options& o, run_result& res, bool& stopped,
              job_options& jopts, restarts& r) {
  auto max_restarts = o.max_restarts;
  if (res.ok || !res.recoverable || stopped || interrupted(o))
    return std::nullopt;
  if (r.count >= max_restarts) {
    if (max_restarts > 0)
      res.error += " (not started again: --max-restarts "
                   + std::to_string(max_restarts) + " used up)";
    return std::nullopt;
  }
  auto from = restart_point(res);
  auto from_text = from ? from->second + " (step " + std::to_string(from->first)
                            + ")"
                        : std::string{"the beginning (no checkpoint yet)"};
  auto failed_at = std::chrono::duration<double>(
                     std::chrono::steady_clock::now() - r.first_start)
                     .count();
  spdlog::warn("job failed after losing {}: {}; starting it again from {}",
               res.lost, res.error, from_text);
  std::string why;
  auto placed = placement_now(sys, original, o, why);
  if (interrupted(o)) {
    // Interrupted while it was placed: not started again.
    res.error += " (not started again: interrupted)";
    stopped = true;
    return std::nullopt;
  }
  if (!placed) {
    res.error += " (not started again: " + why + ")";
    return std::nullopt;
  }
  bool training = false;
  auto steps = trainer_steps(res.final, training);
  std::string line = "after losing " + res.lost + " " + fmt::format("{:.1f}", failed_at)
                     + " s into the run (" + res.error + "): from "
                     + from_text;
  if (training) {
    // The steps after the checkpoint are lost with the shards' state and
    // trained again (what the trainers' record id lists cut).
    auto since = steps - static_cast<double>(from ? from->first : 0);
    // Exact for trainers that were stopped (they report as they stop); a
    // trainer lost with its node counts by its last report (0.5 s old at
    // most), hence "at least".
    line += fmt::format("; the trainers had reached step {:.0f} by their "
                        "last counts: at least {:.0f} steps are trained "
                        "again",
                        steps, std::max(since, 0.0));
  }
  auto moved = moved_replicas(last.spec, placed->spec, reg);
  for (auto& m : moved)
    line += "; " + m;
  spdlog::warn("restarting the job {}", line);
  r.lines.push_back(std::move(line));
  for (auto& f : res.tolerated_failures)
    r.tolerated.push_back(f);
  for (auto& f : res.restored)
    r.restored.push_back(f);
  for (auto& f : res.joined)
    r.joined.push_back(f);
  ++r.count;
  jopts.resume = false;
  jopts.resume_step.reset();
  if (from)
    jopts.resume_step = from->first;
  return placed;
}

// job::start with `placed`. While the job is being started again after a
// lost node (`restarting`), a start that fails (another host went away
// meanwhile) is placed again and retried for 30 s. nullopt: it did not
// start; `why` says why.
std::optional<job> start_placed(caf::actor_system& sys, const registry& reg,
                                const loaded_topology& original,
                                loaded_topology& placed,
                                const job_options& jopts,
                                const supervise_options& o, bool restarting,
                                std::string& why) {
  auto began = std::chrono::steady_clock::now();
  for (;;) {
    try {
      return job::start(sys, placed, reg, jopts);
    } catch (const std::exception& ex) {
      why = ex.what();
      if (!restarting
          || std::chrono::steady_clock::now() - began >= restart_patience
          || interrupted(o))
        return std::nullopt;
      spdlog::warn("restart: the job did not start ({}); placing it again",
                   ex.what());
      std::this_thread::sleep_for(std::chrono::seconds{1});
      std::string where;
      auto next = placement_now(sys, original, o, where);
      if (!next) {
        why += "; " + where;
        return std::nullopt;
      }
      placed = std::move(*next);
    }
  }
}

// The last start's result with what the earlier ones had: their tolerated
// and restored lines, the restarts, the whole run's time.
void add_restarts(run_result& res, const restarts& r) {
  if (r.count == 0)
    return;
  res.tolerated_failures.insert(res.tolerated_failures.begin(),
                                r.tolerated.begin(), r.tolerated.end());
  res.restored.insert(res.restored.begin(), r.restored.begin(),
                      r.restored.end());
  res.joined.insert(res.joined.begin(), r.joined.begin(), r.joined.end());
  res.restarts = r.lines;
  res.run_elapsed_s = std::chrono::duration<double>(
                        std::chrono::steady_clock::now() - r.first_start)
                        .count();
}

// Waits for the job's end. The first interrupt stops it (drains the
// pipeline, or takes a checkpoint first when the topology has them); a
// later one aborts it. Returns whether an interrupt stopped it.
bool wait_for_end(job& j, const supervise_options& o, bool checkpoints,
                  run_result& result) {
  bool stop_sent = false;
  bool abort_sent = false;
  int signals_at_stop = 0;
  auto stop_time = std::chrono::steady_clock::now();
  std::optional<run_result> r;
  while (!(r = j.wait_for(std::chrono::milliseconds{100}))) {
    if (abort_sent || !o.interrupts)
      continue;
    auto n = o.interrupts();
    if (n >= 1 && !stop_sent) {
      stop_sent = true;
      signals_at_stop = n;
      stop_time = std::chrono::steady_clock::now();
      if (o.stopping)
        o.stopping();
      if (!o.stop_hint.empty())
        spdlog::warn("interrupted: {} ({})",
                     checkpoints ? "taking a checkpoint, then stopping"
                                 : "draining the pipeline",
                     o.stop_hint);
      j.stop();
      continue;
    }
    if (!stop_sent)
      continue;
    // One Ctrl-C can arrive twice (the terminal's process group and a
    // supervisor such as timeout(1) both signal us): only an interrupt
    // that comes well after the first one aborts.
    if (std::chrono::steady_clock::now() - stop_time
        < std::chrono::milliseconds{500}) {
      signals_at_stop = n;
    } else if (n > signals_at_stop) {
      abort_sent = true;
      j.abort(o.abort_reason);
      if (o.aborted)
        o.aborted();
    }
  }
  result = std::move(*r);
  return stop_sent;
}

supervised_run failed_to_start(std::string why) {
  supervised_run run;
  run.result.error = std::move(why);
  return run;
}

} // namespace

supervised_run supervise(caf::actor_system& sys, const loaded_topology& topo,
                         const registry& reg, supervise_options opts) {
  supervised_run run;
  std::optional<loaded_topology> tuned;
  if (topo.spec.runtime().autotune()) {
    try {
      auto budget = autotune_budget_of(topo.spec.runtime());
      spdlog::info("autotune: measuring the pipeline for {:.1f} s ({} cores, "
                   "{} MiB of RAM budget)",
                   budget.seconds, budget.cpus, budget.ram_bytes >> 20);
      auto r = autotune(sys, topo, reg, budget);
      run.autotune = std::move(r.decisions);
      tuned = std::move(r.tuned);
      for (auto& d : run.autotune)
        spdlog::info("{}", d);
    } catch (const std::exception& ex) {
      return failed_to_start(ex.what());
    }
  }
  const auto& to_run = tuned ? *tuned : topo;
  auto& jopts = opts.job;
  if (opts.prepare) {
    try {
      opts.prepare(to_run, jopts);
    } catch (const std::exception& ex) {
      auto failed = failed_to_start(ex.what());
      failed.autotune = std::move(run.autotune);
      return failed;
    }
  }
  restarts again;
  auto placed = to_run;
  for (;;) {
    // (Once the restarts are used up, a loss is handled as without them.)
    jopts.restart_on_loss = again.count < opts.max_restarts
                            && to_run.spec.has_checkpoint();
    std::string why;
    auto j = start_placed(sys, reg, to_run, placed, jopts, opts,
                          again.count > 0, why);
    if (!j && again.count == 0) {
      auto failed = failed_to_start(why);
      failed.autotune = std::move(run.autotune);
      return failed;
    }
    if (!j) {
      // The summary is the last start's, which failed for its lost node.
      run.result.error += " (not started again: " + why + ")";
      run.interrupted = interrupted(opts);
      break;
    }
    run.started = true;
    if (opts.started) {
      try {
        opts.started(*j, again.count);
      } catch (const std::exception& ex) {
        j->abort(ex.what());
        auto failed = failed_to_start(ex.what());
        failed.autotune = std::move(run.autotune);
        return failed;
      }
    }
    run.interrupted = wait_for_end(*j, opts, to_run.spec.has_checkpoint(),
                                   run.result);
    auto next = restart_after(sys, reg, to_run, placed, opts, run.result,
                              run.interrupted, jopts, again);
    if (!next)
      break;
    placed = std::move(*next);
  }
  add_restarts(run.result, again);
  return run;
}

} // namespace af
