// Autotune: choose replica counts and edge windows from a short measuring
// run instead of by hand. Declared in runtime/job/autotune.hpp.
#include "actorflow/runtime/job/autotune.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <unistd.h>

#include "actorflow/gpu/cpu_threads.hpp"
#include "actorflow/runtime/job/job.hpp"

namespace af {

autotune_budget autotune_budget_of(const topology::Runtime& rt) {
  autotune_budget b;
  b.cpus = rt.has_cpu_budget() && rt.cpu_budget() > 0
             ? static_cast<size_t>(rt.cpu_budget())
             : static_cast<size_t>(gpu::usable_cores());
  if (rt.has_ram_budget_bytes() && rt.ram_budget_bytes() > 0) {
    b.ram_bytes = static_cast<uint64_t>(rt.ram_budget_bytes());
  } else {
    auto pages = ::sysconf(_SC_PHYS_PAGES);
    auto page = ::sysconf(_SC_PAGESIZE);
    b.ram_bytes = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page)
                  / 2;
  }
  if (rt.has_autotune_seconds() && rt.autotune_seconds() > 0)
    b.seconds = rt.autotune_seconds();
  return b;
}

namespace {

struct stage_measure {
  double busy_s = 0;
  uint64_t items_out = 0;
  uint64_t bytes_out = 0;
};

std::string human_bytes(double v) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

} // namespace

autotune_result autotune(caf::actor_system& sys, const loaded_topology& topo,
                         const registry& reg, const autotune_budget& budget) {
  autotune_result result{topo, {}};
  auto j = job::start(sys, topo, reg);
  auto limit = std::chrono::milliseconds{
    static_cast<int64_t>(budget.seconds * 1000)};
  auto measured = j.wait_for(limit);
  if (!measured) {
    j.stop();
    measured = j.wait();
  }
  if (!measured->ok)
    throw std::runtime_error("autotune: the measuring run failed: "
                             + measured->error);
  std::map<std::string, stage_measure> m;
  for (auto& s : measured->final.stages) {
    auto& x = m[s.stage_name];
    x.busy_s += s.busy_s;
    x.items_out += s.items_out;
    x.bytes_out += s.bytes_out;
  }
  auto& spec = result.tuned.spec;
  uint64_t source_items = 0;
  for (auto& s : spec.stage())
    if (s.input_size() == 0)
      source_items += m[s.name()].items_out;
  if (source_items == 0) {
    result.decisions.push_back("autotune: the measuring run produced no "
                               "items; the topology is used as written");
    return result;
  }
  // CPU seconds per source item, per stage.
  double total = 0;
  std::map<std::string, double> cost;
  for (auto& s : spec.stage()) {
    cost[s.name()] = m[s.name()].busy_s / static_cast<double>(source_items);
    total += cost[s.name()];
  }
  auto cpus = static_cast<double>(budget.cpus);
  for (auto& s : *spec.mutable_stage()) {
    auto* type = reg.find(s.type());
    if (type == nullptr || !type->one_to_one)
      continue;
    auto share = total > 0 ? cost[s.name()] / total : 0;
    auto want = static_cast<int64_t>(
      std::clamp(std::round(share * cpus), 1.0, cpus));
    auto had = replicas_of(s);
    char why[256];
    std::snprintf(why, sizeof why,
                  "%.1f us per source item, %.0f%% of the pipeline's CPU, "
                  "budget %zu cores",
                  cost[s.name()] * 1e6, share * 100, budget.cpus);
    if (want != had) {
      result.decisions.push_back("autotune: " + s.name() + " replicas "
                                 + std::to_string(had) + " -> "
                                 + std::to_string(want) + " (" + why + ")");
      s.set_replicas(want);
    } else {
      result.decisions.push_back("autotune: " + s.name() + " keeps "
                                 + std::to_string(had) + " replicas ("
                                 + why + ")");
    }
  }
  // Windows: an equal share of the RAM budget per edge and replica pair.
  std::map<std::string, const topology::Stage*> by_name;
  for (auto& s : spec.stage())
    by_name[s.name()] = &s;
  size_t edges = 0;
  for (auto& s : spec.stage())
    edges += static_cast<size_t>(s.input_size());
  for (auto& s : *spec.mutable_stage())
    for (auto& in : *s.mutable_input()) {
      auto& pm = m[in.stage()];
      if (pm.items_out == 0 || edges == 0)
        continue;
      double item = static_cast<double>(pm.bytes_out)
                    / static_cast<double>(pm.items_out);
      auto pairs = static_cast<double>(replicas_of(*by_name[in.stage()])
                                       * replicas_of(s));
      double share = static_cast<double>(budget.ram_bytes)
                     / static_cast<double>(edges);
      auto fit = std::floor(share / (std::max(item, 1.0) * pairs));
      auto window = static_cast<int64_t>(std::clamp(fit, 2.0, 64.0));
      auto had = window_of(in);
      if (window != had) {
        result.decisions.push_back(
          "autotune: edge " + in.stage() + " -> " + s.name() + " window "
          + std::to_string(had) + " -> " + std::to_string(window) + " (items of "
          + human_bytes(item) + ", " + std::to_string(static_cast<int>(pairs))
          + " replica pairs, " + human_bytes(share) + " of RAM per edge)");
        in.set_window(window);
      }
    }
  return result;
}

} // namespace af
