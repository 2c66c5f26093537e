#include "apps/actorflow/report.hpp"

#include <map>

#include "apps/actorflow/progress.hpp"

namespace af::cli {

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
  struct row {
    int replicas = 0;
    uint64_t in = 0, out = 0;
    double busy = 0, wait_in = 0, wait_credit = 0;
  };
  std::vector<std::string> names;
  std::map<std::string, row> rows;
  for (auto& s : p.stages) {
    if (!rows.count(s.stage_name))
      names.push_back(s.stage_name);
    auto& x = rows[s.stage_name];
    ++x.replicas;
    x.in += s.items_in;
    x.out += s.items_out;
    x.busy += s.busy_s;
    x.wait_in += s.wait_input_s;
    x.wait_credit += s.wait_credit_s;
  }
  std::fprintf(out, "  %-16s %8s %12s %12s %7s %9s %12s\n", "stage", "replicas",
               "items in", "items out", "busy", "wait-in", "wait-credit");
  for (auto& name : names) {
    auto& x = rows[name];
    auto total = x.busy + x.wait_in + x.wait_credit;
    auto pct = [&](double v) {
      return total > 0 ? 100.0 * v / total : 0.0;
    };
    std::fprintf(out, "  %-16s %8d %12llu %12llu %6.1f%% %8.1f%% %11.1f%%\n",
                 name.c_str(), x.replicas,
                 static_cast<unsigned long long>(x.in),
                 static_cast<unsigned long long>(x.out), pct(x.busy),
                 pct(x.wait_in), pct(x.wait_credit));
  }
  auto t = training_of(p);
  if (t.training) {
    std::fprintf(out,
                 "  training: %.0f steps, %.0f samples, %.0f samples/s, "
                 "last epoch's loss %.4f, max staleness %.0f",
                 t.steps, t.samples, t.samples / secs, t.loss,
                 t.staleness_max);
    if (t.skipped > 0)
      std::fprintf(out, ", %.0f steps skipped (NaN/Inf)", t.skipped);
    std::fprintf(out, "\n");
  }
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
  if (!r.resumed_from.empty())
    std::fprintf(out, "  resumed from %s (step %llu)\n",
                 r.resumed_from.c_str(),
                 static_cast<unsigned long long>(r.resumed_step));
  if (r.checkpoints > 0)
    std::fprintf(out, "  checkpoints written: %llu, the newest %s\n",
                 static_cast<unsigned long long>(r.checkpoints),
                 r.last_checkpoint.c_str());
}

} // namespace af::cli
