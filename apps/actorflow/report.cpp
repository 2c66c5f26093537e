// The summary `actorflow run` prints when a job ends. Declared in
// apps/actorflow/report.hpp.
#include "apps/actorflow/report.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include <nlohmann/json.hpp>

#include "actorflow/actors/training/tensorboard_writer.hpp"
#include "apps/actorflow/progress.hpp"

namespace af::cli {

namespace {

// `v` to `digits` decimals, as many as the report has always shown.
double rounded(double v, int digits) {
  auto scale = std::pow(10.0, digits);
  return std::round(v * scale) / scale;
}

} // namespace

std::vector<stage_row> stage_rows(const job_progress& p) {
  std::vector<stage_row> rows;
  std::map<std::string, size_t> at;
  for (auto& s : p.stages) {
    auto [it, fresh] = at.try_emplace(s.stage_name, rows.size());
    if (fresh)
      rows.push_back(stage_row{s.stage_name});
    auto& x = rows[it->second];
    ++x.replicas;
    x.in += s.items_in;
    x.out += s.items_out;
    x.busy_s += s.busy_s;
    x.wait_in_s += s.wait_input_s;
    x.wait_credit_s += s.wait_credit_s;
    for (auto& m : s.metrics)
      if (m.name == metric_name::wait_slot_s)
        x.slot_wait_s += std::min(m.value, s.busy_s);
  }
  return rows;
}

std::vector<utilization_row> utilization_rows(const job_progress& p) {
  std::vector<utilization_row> rows;
  for (auto& s : p.stages) {
    auto it = std::find_if(s.metrics.begin(), s.metrics.end(), [](auto& m) {
      return m.name == metric_name::wait_params_s;
    });
    auto total = s.busy_s + s.wait_input_s + s.wait_credit_s;
    if (it == s.metrics.end() || total <= 0)
      continue;
    auto slot = std::find_if(s.metrics.begin(), s.metrics.end(), [](auto& m) {
      return m.name == metric_name::wait_slot_s;
    });
    rows.push_back({s.stage, s.busy_s / total,
                    std::min(it->value, s.busy_s) / total,
                    s.wait_input_s / total,
                    slot == s.metrics.end()
                      ? -1.0
                      : std::min(slot->value, s.busy_s) / total});
  }
  return rows;
}

std::vector<step_time_row> step_time_rows(const job_progress& p) {
  // The metric of each field, summed weighted by the replica's timed
  // steps, then divided by all of the stage's.
  const std::pair<const char*, double step_time_row::*> fields[] = {
    {metric_name::step_ms, &step_time_row::step},
    {metric_name::prepare_ms, &step_time_row::prepare},
    {metric_name::slot_wait_ms, &step_time_row::slot_wait},
    {metric_name::pull_ms, &step_time_row::pull},
    {metric_name::param_h2d_ms, &step_time_row::param_h2d},
    {metric_name::input_wait_ms, &step_time_row::input_wait},
    {metric_name::input_h2d_ms, &step_time_row::input_h2d},
    {metric_name::compute_ms, &step_time_row::compute},
    {metric_name::compute_host_ms, &step_time_row::compute_host},
    {metric_name::push_ms, &step_time_row::push},
    {metric_name::grad_d2h_ms, &step_time_row::grad_d2h},
    {metric_name::gap_ms, &step_time_row::gap},
    {metric_name::device_busy, &step_time_row::device_busy},
    {metric_name::input_in_place, &step_time_row::input_in_place}};
  std::vector<step_time_row> rows;
  std::map<std::string, size_t> at;
  for (auto& s : p.stages) {
    double timed = 0;
    for (auto& m : s.metrics)
      if (m.name == metric_name::timed_steps)
        timed = m.value;
    if (timed <= 0)
      continue;
    auto [it, fresh] = at.try_emplace(s.stage_name, rows.size());
    if (fresh)
      rows.push_back(step_time_row{s.stage_name});
    auto& row = rows[it->second];
    row.timed_steps += timed;
    for (auto& m : s.metrics)
      for (auto& [name, field] : fields)
        if (m.name == name)
          row.*field += m.value * timed;
  }
  for (auto& row : rows)
    for (auto& f : fields)
      row.*f.second /= row.timed_steps;
  return rows;
}

bottleneck find_bottleneck(const std::vector<stage_row>& rows) {
  const stage_row* top = nullptr;
  for (auto& x : rows)
    if (top == nullptr || x.share(x.busy_s) > top->share(top->busy_s))
      top = &x;
  if (top == nullptr || top->share(top->busy_s) < 0.5)
    return {"", "no stage was busy half its time: the stages mostly waited "
                "for each other (small windows?) or for the network"};
  char busy[64];
  std::snprintf(busy, sizeof busy, "%d replica%s busy %.0f%%", top->replicas,
                top->replicas == 1 ? "" : "s",
                100.0 * top->share(top->busy_s));
  std::string what = top->name + " is the bottleneck: " + busy + " - ";
  if (top->in == 0)
    return {top->name, what + "reading is the limit: more replicas (the "
                              "input is sharded across them) or faster "
                              "storage"};
  // Trainers taking turns (concurrent_steps) wait for the cores, and more
  // of them would only wait more.
  if (top->out == 0 && top->share(top->slot_wait_s) >= 0.25) {
    char slot[96];
    std::snprintf(slot, sizeof slot, "%.0f%% of it waiting for a step slot",
                  100.0 * top->share(top->slot_wait_s));
    return {top->name, what + slot + " - the cores of its concurrent_steps "
                              "are the limit: more trainers would wait "
                              "more; a faster device or trainers on more "
                              "cores (nodes) would help"};
  }
  if (top->out == 0)
    return {top->name, what + "the end of the pipeline is the limit and the "
                              "input keeps up (for training: more trainers "
                              "or a faster device)"};
  return {top->name, what + "it needs more replicas (cores), or less work "
                            "per record"};
}

void print_summary(std::FILE* out, const std::string& job_name,
                   const run_result& r) {
  auto& p = r.final;
  auto secs = p.elapsed_s > 0 ? p.elapsed_s : 1e-9;
  const char* how =
    r.ok ? (r.stopped ? "stopped early" : "finished") : "failed";
  std::fprintf(out, "job '%s' %s after %.2f s\n", job_name.c_str(), how,
               p.elapsed_s);
  std::fprintf(out, "  delivered: %llu records in %llu items, %s\n",
               static_cast<unsigned long long>(p.records),
               static_cast<unsigned long long>(p.items),
               human_bytes(static_cast<double>(p.bytes)).c_str());
  std::fprintf(out, "  throughput: %.0f records/s, %.0f items/s, %s/s\n",
               static_cast<double>(p.records) / secs,
               static_cast<double>(p.items) / secs,
               human_bytes(static_cast<double>(p.bytes) / secs).c_str());
  if (auto net = network_bytes_of(p); net > 0)
    std::fprintf(out, "  network: %s between nodes (%s/s)\n",
                 human_bytes(static_cast<double>(net)).c_str(),
                 human_bytes(static_cast<double>(net) / secs).c_str());
  if (p.coordinator_bytes > 0) {
    auto net = network_bytes_of(p);
    // Whole percents; two decimals below 1% (the data plane's share is
    // hundredths of a percent, docs/multi-host.md).
    std::string share;
    if (net > 0) {
      auto pct = 100.0 * static_cast<double>(p.coordinator_bytes)
                 / static_cast<double>(net);
      char buf[32];
      std::snprintf(buf, sizeof buf, pct < 1 ? "%.2f" : "%.0f", pct);
      share = std::string{", "} + buf + "% of the data between nodes";
    }
    std::fprintf(out,
                 "  through the coordinator: %s sent and received over its "
                 "connections to the nodes%s\n",
                 human_bytes(static_cast<double>(p.coordinator_bytes)).c_str(),
                 share.c_str());
  }
  auto rows = stage_rows(p);
  std::fprintf(out, "  %-16s %8s %12s %12s %7s %9s %12s\n", "stage", "replicas",
               "items in", "items out", "busy", "wait-in", "wait-credit");
  for (auto& x : rows)
    std::fprintf(out, "  %-16s %8d %12llu %12llu %6.1f%% %8.1f%% %11.1f%%\n",
                 x.name.c_str(), x.replicas,
                 static_cast<unsigned long long>(x.in),
                 static_cast<unsigned long long>(x.out),
                 100.0 * x.share(x.busy_s), 100.0 * x.share(x.wait_in_s),
                 100.0 * x.share(x.wait_credit_s));
  if (!rows.empty())
    std::fprintf(out, "  bottleneck: %s\n", find_bottleneck(rows).hint.c_str());
  auto t = training_of(p);
  if (t.training) {
    std::fprintf(out,
                 "  training: %.0f steps, %.0f samples, %.0f samples/s, "
                 "last epoch's loss %.4f, max staleness %.0f",
                 t.steps, t.samples, (t.samples - t.samples_resumed) / secs,
                 t.loss,
                 t.staleness_max);
    if (t.skipped > 0)
      std::fprintf(out, ", %.0f steps skipped (NaN/Inf)", t.skipped);
    std::fprintf(out, "\n");
  }
  for (auto& x : utilization_rows(p)) {
    char slot[64] = "";
    if (x.slot_wait >= 0)
      std::snprintf(slot, sizeof slot, ", for a step slot %.0f%%",
                    100.0 * x.slot_wait);
    std::fprintf(out,
                 "  utilization of %s: busy %.0f%% (of which waiting for "
                 "parameters %.0f%%%s), waiting for input %.0f%%\n",
                 x.replica.c_str(), 100.0 * x.busy, 100.0 * x.param_wait,
                 slot, 100.0 * x.input_wait);
  }
  for (auto& x : step_time_rows(p))
    std::fprintf(out,
                 "  step time of %s (%.0f steps timed), ms: %.3f = prepare "
                 "%.3f + step slot %.3f + pull %.3f (parameters H2D %.3f) + "
                 "wait for input "
                 "%.3f + compute %.3f (host %.3f) + push %.3f (gradients D2H "
                 "%.3f) + gaps %.3f; input H2D %.3f, outside the sum; "
                 "input read in GPU memory %.0f%%; device busy %.0f%%\n",
                 x.stage.c_str(), x.timed_steps, x.step, x.prepare,
                 x.slot_wait, x.pull,
                 x.param_h2d, x.input_wait, x.compute, x.compute_host, x.push,
                 x.grad_d2h, x.gap, x.input_h2d, 100.0 * x.input_in_place,
                 100.0 * x.device_busy);
  if (t.evaluated) {
    std::fprintf(out, "  test (step %.0f): loss %.4f", t.eval_step,
                 t.test_loss);
    if (t.test_accuracy >= 0)
      std::fprintf(out, ", accuracy %.4f", t.test_accuracy);
    if (t.test_auc >= 0)
      std::fprintf(out, ", AUC %.4f", t.test_auc);
    if (t.reference_auc >= 0)
      std::fprintf(out, " (planted model's AUC %.4f)", t.reference_auc);
    std::fprintf(out, "\n");
  }
  for (auto& f : r.tolerated_failures)
    std::fprintf(out, "  replica lost%s: %s\n", r.ok ? ", job went on" : "",
                 f.c_str());
  for (auto& line : r.restored)
    std::fprintf(out, "  restored: %s\n", line.c_str());
  for (auto& line : r.joined)
    std::fprintf(out, "  joined: %s\n", line.c_str());
  if (!r.resumed_from.empty()) {
    std::fprintf(out, "  resumed from %s (step %llu)", r.resumed_from.c_str(),
                 static_cast<unsigned long long>(r.resumed_step));
    if (t.samples_resumed > 0)
      std::fprintf(out, "; samples/s counts the %.0f samples trained since",
                   t.samples - t.samples_resumed);
    std::fprintf(out, "\n");
  }
  if (r.checkpoints > 0)
    std::fprintf(out, "  checkpoints written: %llu, the newest %s\n",
                 static_cast<unsigned long long>(r.checkpoints),
                 r.last_checkpoint.c_str());
  for (auto& line : r.restarts)
    std::fprintf(out, "  restarted: %s\n", line.c_str());
  if (!r.restarts.empty())
    std::fprintf(out,
                 "  started %zu times; %.2f s from the first start (the "
                 "figures above are the last start's)\n",
                 r.restarts.size() + 1, r.run_elapsed_s);
}

void write_report_json(std::FILE* out, const std::string& job_name,
                       const run_result& r) {
  using json = nlohmann::ordered_json;
  auto& p = r.final;
  auto secs = p.elapsed_s > 0 ? p.elapsed_s : 1e-9;
  auto rows = stage_rows(p);
  auto b = find_bottleneck(rows);
  auto stages = json::array();
  for (auto& x : rows)
    stages.push_back(
      {{"name", x.name},
       {"replicas", x.replicas},
       {"items_in", x.in},
       {"items_out", x.out},
       {"items_per_s",
        rounded(static_cast<double>(x.out > 0 ? x.out : x.in) / secs, 3)},
       {"busy", rounded(x.share(x.busy_s), 4)},
       {"wait_input", rounded(x.share(x.wait_in_s), 4)},
       {"wait_credit", rounded(x.share(x.wait_credit_s), 4)}});
  auto step_time = json::array();
  for (auto& x : step_time_rows(p))
    step_time.push_back({{"stage", x.stage},
                         {"timed_steps", x.timed_steps},
                         {"step_ms", rounded(x.step, 4)},
                         {"prepare_ms", rounded(x.prepare, 4)},
                         {"slot_wait_ms", rounded(x.slot_wait, 4)},
                         {"pull_ms", rounded(x.pull, 4)},
                         {"param_h2d_ms", rounded(x.param_h2d, 4)},
                         {"input_wait_ms", rounded(x.input_wait, 4)},
                         {"input_h2d_ms", rounded(x.input_h2d, 4)},
                         {"compute_ms", rounded(x.compute, 4)},
                         {"compute_host_ms", rounded(x.compute_host, 4)},
                         {"push_ms", rounded(x.push, 4)},
                         {"grad_d2h_ms", rounded(x.grad_d2h, 4)},
                         {"gap_ms", rounded(x.gap, 4)},
                         {"device_busy", rounded(x.device_busy, 4)},
                         {"input_in_place", rounded(x.input_in_place, 4)}});
  auto utilization = json::array();
  for (auto& x : utilization_rows(p)) {
    json row = {{"replica", x.replica},
                {"busy", rounded(x.busy, 4)},
                {"param_wait", rounded(x.param_wait, 4)},
                {"input_wait", rounded(x.input_wait, 4)}};
    if (x.slot_wait >= 0)
      row["slot_wait"] = rounded(x.slot_wait, 4);
    utilization.push_back(std::move(row));
  }
  // Every replica's latest metrics ("evaluate[0]": {"test_accuracy": ...}).
  auto metrics = json::object();
  for (auto& s : p.stages) {
    if (s.metrics.empty())
      continue;
    auto m = json::object();
    for (auto& x : s.metrics)
      m[x.name] = x.value;
    metrics[s.stage] = std::move(m);
  }
  json report = {{"job", job_name},
                 {"ok", r.ok},
                 {"stopped", r.stopped},
                 {"error", r.error},
                 {"elapsed_s", rounded(p.elapsed_s, 3)},
                 {"records", p.records},
                 {"items", p.items},
                 {"bytes", p.bytes},
                 {"network_bytes", network_bytes_of(p)},
                 {"coordinator_bytes", p.coordinator_bytes},
                 {"restarts", r.restarts},
                 {"run_elapsed_s",
                  rounded(r.restarts.empty() ? p.elapsed_s : r.run_elapsed_s,
                          3)},
                 {"stages", std::move(stages)},
                 {"metrics", std::move(metrics)},
                 {"step_time", std::move(step_time)},
                 {"utilization", std::move(utilization)},
                 {"bottleneck", {{"stage", b.stage}, {"hint", b.hint}}}};
  std::fprintf(out, "%s\n",
               report.dump(1, ' ', false, json::error_handler_t::replace)
                 .c_str());
}

} // namespace af::cli
