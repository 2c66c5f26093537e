// Starting a job again after a lost node (apps/actorflow/restart.hpp).
#include "apps/actorflow/restart.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <thread>

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include "apps/actorflow/options.hpp"
#include "apps/actorflow/progress.hpp"
#include "runtime/relocate.hpp"

namespace af::cli {

namespace {

// How long a job whose node was lost waits for a placement (a host of
// every stage's answering), and how long one host may take to answer.
constexpr auto restart_patience = std::chrono::seconds{30};
constexpr auto probe_timeout = std::chrono::seconds{2};

} // namespace

std::optional<std::pair<uint64_t, std::string>>
restart_point(const run_result& r) {
  if (r.checkpoints > 0)
    return std::pair{r.last_checkpoint_step, r.last_checkpoint};
  if (!r.resumed_from.empty())
    return std::pair{r.resumed_step, r.resumed_from};
  return std::nullopt;
}

std::optional<loaded_topology> placement_now(caf::actor_system& sys,
                                             const loaded_topology& original,
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
    if (signals_received.load() > 0) {
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

std::optional<loaded_topology>
restart_after(caf::actor_system& sys, const registry& reg,
              const loaded_topology& original, const loaded_topology& last,
              int max_restarts, run_result& res, bool& interrupted,
              job_options& jopts, restarts& r) {
  if (res.ok || !res.recoverable || interrupted
      || signals_received.load() > 0)
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
  auto placed = placement_now(sys, original, why);
  if (signals_received.load() > 0) {
    // Interrupted while it was placed: not started again.
    res.error += " (not started again: interrupted)";
    interrupted = true;
    return std::nullopt;
  }
  if (!placed) {
    res.error += " (not started again: " + why + ")";
    return std::nullopt;
  }
  auto t = training_of(res.final);
  std::string line = "after losing " + res.lost + " " + fmt::format("{:.1f}", failed_at)
                     + " s into the run (" + res.error + "): from "
                     + from_text;
  if (t.training) {
    // The steps after the checkpoint are lost with the shards' state and
    // trained again (what the trainers' record id lists cut).
    auto since = t.steps - static_cast<double>(from ? from->first : 0);
    // Exact for trainers that were stopped (they report as they stop); a
    // trainer lost with its node counts by its last report (0.5 s old at
    // most), hence "at least".
    line += fmt::format("; the trainers had reached step {:.0f} by their "
                        "last counts: at least {:.0f} steps are trained "
                        "again",
                        t.steps, std::max(since, 0.0));
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

std::optional<job> start_placed(caf::actor_system& sys, const registry& reg,
                                const loaded_topology& original,
                                loaded_topology& placed,
                                const job_options& jopts, bool restarting,
                                std::string& why) {
  auto began = std::chrono::steady_clock::now();
  for (;;) {
    try {
      return job::start(sys, placed, reg, jopts);
    } catch (const std::exception& ex) {
      why = ex.what();
      if (!restarting
          || std::chrono::steady_clock::now() - began >= restart_patience
          || signals_received.load() > 0)
        return std::nullopt;
      spdlog::warn("restart: the job did not start ({}); placing it again",
                   ex.what());
      std::this_thread::sleep_for(std::chrono::seconds{1});
      std::string where;
      auto next = placement_now(sys, original, where);
      if (!next) {
        why += "; " + where;
        return std::nullopt;
      }
      placed = std::move(*next);
    }
  }
}

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

} // namespace af::cli
