// A job's numbers as TensorBoard scalars, written by a metrics actor
// (docs/monitoring.md). Declared in actors/training/tensorboard_writer.hpp.
#include "actorflow/actors/training/tensorboard_writer.hpp"

#include <algorithm>
#include <memory>
#include <set>

#include <caf/actor_system.hpp>
#include <caf/atom.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <spdlog/spdlog.h>

#include "actorflow/runtime/core/census.hpp"
#include "actorflow/runtime/formats/event_writer.hpp"

namespace af {

namespace {

// Stage metrics summed over replicas; "staleness_max" takes the largest;
// every other one the mean.
const std::set<std::string> summed = {
  metric_name::step,          metric_name::samples,
  metric_name::samples_per_s, metric_name::skipped_steps,
  metric_name::evaluations,   metric_name::network_bytes};

} // namespace

uint64_t network_bytes_of(const job_progress& p) {
  uint64_t n = 0;
  for (auto& s : p.stages) {
    for (auto& e : s.out_edges)
      if (e.remote)
        n += e.bytes_sent;
    for (auto& m : s.metrics)
      if (m.name == metric_name::network_bytes)
        n += static_cast<uint64_t>(m.value);
  }
  return n;
}

std::vector<metric> progress_scalars::next(const job_progress& p,
                                           int64_t& step) {
  std::vector<metric> out;
  double dt = p.elapsed_s - last_elapsed_;
  struct agg {
    uint64_t items = 0;
    double busy_s = 0, input_s = 0, credit_s = 0;
    int replicas = 0;
    uint64_t window = 0;
    std::map<std::string, std::pair<double, int>> metrics; // sum, count
    std::map<std::string, double> maxima;
  };
  std::map<std::string, agg> stages;
  std::vector<std::string> order;
  for (auto& s : p.stages) {
    auto name = s.stage_name.empty() ? s.stage : s.stage_name;
    if (!stages.count(name))
      order.push_back(name);
    auto& a = stages[name];
    a.items += s.is_sink ? s.items_in : s.items_out;
    a.busy_s += s.busy_s;
    a.input_s += s.wait_input_s;
    a.credit_s += s.wait_credit_s;
    ++a.replicas;
    for (auto& e : s.out_edges)
      a.window = std::max(a.window, e.window);
    for (auto& m : s.metrics) {
      auto& [sum, n] = a.metrics[m.name];
      sum += m.value;
      ++n;
      auto& mx = a.maxima[m.name];
      mx = n == 1 ? m.value : std::max(mx, m.value);
    }
  }
  auto network = network_bytes_of(p);
  double global_step = 0;
  bool trainers = false;
  for (auto& name : order) {
    auto& a = stages[name];
    auto& before = last_[name];
    auto prefix = "stage/" + name + "/";
    if (dt > 0) {
      auto span = dt * a.replicas;
      out.push_back({prefix + "items_per_s",
                     static_cast<double>(a.items - std::min(a.items,
                                                            before.items))
                       / dt});
      out.push_back({prefix + "busy", (a.busy_s - before.busy_s) / span});
      out.push_back({prefix + "input_wait",
                     (a.input_s - before.input_s) / span});
      out.push_back({prefix + "credit_wait",
                     (a.credit_s - before.credit_s) / span});
    }
    out.push_back({prefix + "replicas", static_cast<double>(a.replicas)});
    if (a.window > 0)
      out.push_back({prefix + "window", static_cast<double>(a.window)});
    before = totals{a.items, a.busy_s, a.input_s, a.credit_s};
    for (auto& [m, sn] : a.metrics) {
      double v = summed.count(m)                   ? sn.first
                 : m == metric_name::staleness_max ? a.maxima[m]
                                                   : sn.first / sn.second;
      out.push_back({name + "/" + m, v});
      if (m == metric_name::step && a.metrics.count(metric_name::samples)) {
        trainers = true;
        global_step += sn.first;
      }
    }
  }
  if (dt > 0) {
    out.push_back({"job/records_per_s",
                   static_cast<double>(p.records - std::min(p.records,
                                                            last_records_))
                     / dt});
    out.push_back({"job/bytes_per_s",
                   static_cast<double>(p.bytes - std::min(p.bytes,
                                                          last_bytes_))
                     / dt});
    out.push_back({"job/network_bytes_per_s",
                   static_cast<double>(network - std::min(network,
                                                          last_network_))
                     / dt});
  }
  // Each trainer replica's use of its time since the last report (the
  // seed's "GPU utilization"; apps/actorflow/report.hpp).
  for (auto& s : p.stages) {
    auto it = std::find_if(s.metrics.begin(), s.metrics.end(), [](auto& m) {
      return m.name == metric_name::wait_params_s;
    });
    if (it == s.metrics.end())
      continue;
    auto& before = last_replica_[s.stage];
    auto slot = std::find_if(s.metrics.begin(), s.metrics.end(), [](auto& m) {
      return m.name == metric_name::wait_slot_s;
    });
    replica_totals now{s.busy_s, s.wait_input_s, s.wait_credit_s, it->value,
                       slot == s.metrics.end() ? 0.0 : slot->value};
    auto span = (now.busy_s - before.busy_s) + (now.input_s - before.input_s)
                + (now.credit_s - before.credit_s);
    if (span > 0) {
      auto prefix = "stage/" + s.stage + "/";
      out.push_back({prefix + "busy", (now.busy_s - before.busy_s) / span});
      out.push_back({prefix + "param_wait",
                     std::max(0.0, now.params_s - before.params_s) / span});
      out.push_back({prefix + "input_wait",
                     (now.input_s - before.input_s) / span});
      if (slot != s.metrics.end()) // trainer { concurrent_steps }
        out.push_back({prefix + "slot_wait",
                       std::max(0.0, now.slot_s - before.slot_s) / span});
    }
    before = now;
  }
  out.push_back({"job/network_bytes", static_cast<double>(network)});
  out.push_back({"job/coordinator_bytes",
                 static_cast<double>(p.coordinator_bytes)});
  last_network_ = network;
  last_elapsed_ = p.elapsed_s;
  last_records_ = p.records;
  last_bytes_ = p.bytes;
  step = std::max(first_step_, trainers ? static_cast<int64_t>(global_step)
                                         : static_cast<int64_t>(p.records));
  return out;
}

std::vector<scalar_event> progress_scalars::events(const job_progress& p,
                                                  std::vector<metric>& values) {
  for (auto& e : p.scalars)
    event_tags_.insert(e.name);
  values.erase(std::remove_if(values.begin(), values.end(),
                              [&](const metric& m) {
                                return event_tags_.count(m.name) > 0;
                              }),
               values.end());
  std::vector<scalar_event> out;
  for (auto& e : p.scalars)
    if (e.step >= first_step_)
      out.push_back(e);
  return out;
}

namespace {

struct writer_state {
  std::shared_ptr<event_writer> writer;
  bool failed = false;
};

caf::behavior event_writer_main(caf::stateful_actor<writer_state>* self,
                                std::shared_ptr<event_writer> w) {
  self->state.writer = std::move(w);
  return {
    [=](metrics_atom, int64_t step, const std::vector<metric>& values,
        const std::vector<histogram_summary>& histograms, bool last) {
      auto& st = self->state;
      if (last)
        self->quit(); // after this event: the job's final numbers
      if (st.failed)
        return;
      std::vector<std::pair<std::string, double>> scalars;
      scalars.reserve(values.size());
      for (auto& m : values)
        scalars.emplace_back(m.name, m.value);
      try {
        st.writer->scalars(step, scalars);
        for (auto& h : histograms)
          st.writer->histogram(h);
      } catch (const std::exception& ex) {
        // The job goes on without its event file.
        st.failed = true;
        spdlog::error("TensorBoard events: {}; no more are written", ex.what());
      }
    },
    [=](metrics_atom, const std::vector<scalar_event>& events) {
      auto& st = self->state;
      if (st.failed)
        return;
      try {
        for (auto& e : events)
          st.writer->scalars(e.step, {{e.name, e.value}});
      } catch (const std::exception& ex) {
        st.failed = true;
        spdlog::error("TensorBoard events: {}; no more are written", ex.what());
      }
    },
  };
}

} // namespace

caf::actor spawn_event_writer(caf::actor_system& sys,
                              const std::string& run_dir,
                              std::optional<uint64_t> resumed_step) {
  auto w = std::make_shared<event_writer>(run_dir);
  if (resumed_step)
    w->session_start(static_cast<int64_t>(*resumed_step));
  spdlog::info("TensorBoard events: {}", w->path());
  auto a = sys.spawn<caf::detached>(event_writer_main, std::move(w));
  census_add(a, "TensorBoard event writer");
  return a;
}

} // namespace af
