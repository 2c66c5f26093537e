// The live progress display of `actorflow run`: one line rewritten in place
// on a terminal, a log line every few seconds otherwise. Declared in
// apps/actorflow/progress.hpp.
#include "apps/actorflow/progress.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include <spdlog/spdlog.h>

namespace af::cli {

std::string human_count(double v) {
  char buf[32];
  if (v >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2f G", v / 1e9);
  else if (v >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2f M", v / 1e6);
  else if (v >= 1e4)
    std::snprintf(buf, sizeof buf, "%.1f k", v / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

std::string human_bytes(double v) {
  return human_count(v) + "B";
}

training_view training_of(const job_progress& p) {
  training_view t;
  int trainers = 0;
  for (auto& s : p.stages) {
    double step = -1, epoch = 0, samples = 0, resumed = 0, rate = 0,
           loss = 0, stale = 0, skipped = 0;
    for (auto& m : s.metrics) {
      if (m.name == metric_name::step)
        step = m.value;
      else if (m.name == metric_name::epoch)
        epoch = m.value;
      else if (m.name == metric_name::samples)
        samples = m.value;
      else if (m.name == metric_name::samples_resumed)
        resumed = m.value;
      else if (m.name == metric_name::samples_per_s)
        rate = m.value;
      else if (m.name == metric_name::loss)
        loss = m.value;
      else if (m.name == metric_name::staleness_max)
        stale = m.value;
      else if (m.name == metric_name::skipped_steps)
        skipped = m.value;
      else if (m.name == metric_name::eval_step) {
        t.evaluated = true;
        t.eval_step = m.value;
      } else if (m.name == metric_name::test_loss)
        t.test_loss = m.value;
      else if (m.name == metric_name::test_accuracy)
        t.test_accuracy = m.value;
      else if (m.name == metric_name::test_auc)
        t.test_auc = m.value;
      else if (m.name == metric_name::reference_auc)
        t.reference_auc = m.value;
    }
    if (step < 0) {
      // A trainer replica that was lost and respawned: its samples count,
      // its steps are the new one's (the worker's clock).
      t.samples += samples;
      t.samples_resumed += resumed;
      t.skipped += skipped;
      continue;
    }
    t.training = true;
    ++trainers;
    t.epoch = std::max(t.epoch, epoch + 1);
    t.steps += step;
    t.samples += samples;
    t.samples_resumed += resumed;
    t.samples_per_s += rate;
    t.loss += loss;
    t.staleness_max = std::max(t.staleness_max, stale);
    t.skipped += skipped;
  }
  if (trainers > 0)
    t.loss /= trainers;
  return t;
}

std::string human_duration(double seconds) {
  auto s = static_cast<long long>(seconds + 0.5);
  char buf[32];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%lld s", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", s / 3600, s / 60 % 60);
  return buf;
}

namespace {

// Stage types that pass every record they take on, one for one.
const std::set<std::string> passes_records = {"batcher", "shuffle",
                                              "example_parse",
                                              "image_decode"};

std::optional<double>
records_into(const topology::Topology& spec, const std::string& stage,
             const std::map<std::string, std::pair<double, int64_t>>& totals,
             int depth) {
  if (depth > spec.stage_size()) // (a cycle: validation rejects those)
    return std::nullopt;
  const topology::Stage* s = nullptr;
  for (auto& x : spec.stage())
    if (x.name() == stage)
      s = &x;
  if (s == nullptr)
    return std::nullopt;
  if (auto it = totals.find(stage); it != totals.end()) {
    if (it->second.second == replicas_of(*s))
      return it->second.first;
    return std::nullopt;
  }
  if (!passes_records.count(s->type()) || s->input_size() == 0)
    return std::nullopt;
  double sum = 0;
  for (auto& in : s->input()) {
    auto r = records_into(spec, in.stage(), totals, depth + 1);
    if (!r)
      return std::nullopt;
    sum += *r;
  }
  return sum;
}

} // namespace

std::optional<double> expected_training_records(const topology::Topology& spec,
                                                const job_progress& p) {
  // records_total summed over the replicas reporting it, per stage.
  std::map<std::string, std::pair<double, int64_t>> totals;
  for (auto& s : p.stages)
    for (auto& m : s.metrics)
      if (m.name == metric_name::records_total) {
        auto& t = totals[s.stage_name];
        t.first += m.value;
        ++t.second;
      }
  double sum = 0;
  bool any = false;
  for (auto& s : spec.stage()) {
    if (s.type() != "trainer")
      continue;
    for (auto& in : s.input()) {
      auto r = records_into(spec, in.stage(), totals, 0);
      if (!r)
        return std::nullopt;
      sum += *r;
      any = true;
    }
  }
  if (!any)
    return std::nullopt;
  return sum;
}

namespace {

std::string training_line(const training_view& t,
                          std::optional<double> expected) {
  char buf[320];
  int n = std::snprintf(buf, sizeof buf,
                        "epoch %.0f | step %.0f | loss %.4f | %s samples/s",
                        t.epoch, t.steps, t.loss,
                        human_count(t.samples_per_s).c_str());
  auto append = [&](const char* fmt, auto... args) {
    if (n > 0 && static_cast<size_t>(n) < sizeof buf)
      n += std::snprintf(buf + n, sizeof buf - static_cast<size_t>(n), fmt,
                         args...);
  };
  if (t.evaluated) {
    if (t.test_accuracy >= 0)
      append(" | test accuracy %.4f", t.test_accuracy);
    else if (t.test_auc >= 0)
      append(" | test AUC %.4f", t.test_auc);
  }
  if (expected && *expected > 0 && t.samples_per_s > 0) {
    auto left = std::max(0.0, *expected - t.samples);
    append(" | %.0f%% | ETA %s", std::min(100.0, 100 * t.samples / *expected),
           human_duration(left / t.samples_per_s).c_str());
  }
  return buf;
}

} // namespace

progress_display::progress_display(bool terminal, std::chrono::seconds every,
                                   const topology::Topology* spec)
  : terminal_(terminal), spec_(spec), log_every_(every),
    last_log_(std::chrono::steady_clock::now()) {
}

void progress_display::update(const job_progress& p) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto secs = p.elapsed_s - last_elapsed_;
  if (secs <= 0)
    secs = 1e-9;
  auto records_per_s = static_cast<double>(p.records - last_records_) / secs;
  auto bytes_per_s = static_cast<double>(p.bytes - last_bytes_) / secs;
  auto training = training_of(p);
  std::optional<double> expected;
  if (training.training && spec_ != nullptr)
    expected = expected_training_records(*spec_, p);
  if (terminal_ && training.training) {
    std::fprintf(stderr, "\r\033[K%s | %.1f s",
                 training_line(training, expected).c_str(), p.elapsed_s);
    std::fflush(stderr);
    line_shown_ = true;
    return;
  }
  if (terminal_) {
    last_elapsed_ = p.elapsed_s;
    last_records_ = p.records;
    last_bytes_ = p.bytes;
    std::fprintf(stderr,
                 "\r\033[K%s items | %s records | %s records/s | %s/s | "
                 "%.1f s",
                 human_count(static_cast<double>(p.items)).c_str(),
                 human_count(static_cast<double>(p.records)).c_str(),
                 human_count(records_per_s).c_str(),
                 human_bytes(bytes_per_s).c_str(), p.elapsed_s);
    std::fflush(stderr);
    line_shown_ = true;
    return;
  }
  auto now = std::chrono::steady_clock::now();
  if (now - last_log_ < log_every_)
    return;
  last_log_ = now;
  last_elapsed_ = p.elapsed_s;
  last_records_ = p.records;
  last_bytes_ = p.bytes;
  if (training.training) {
    spdlog::info("progress: {}, {:.1f} s", training_line(training, expected),
                 p.elapsed_s);
    return;
  }
  spdlog::info("progress: {} items, {} records, {} records/s, {:.1f} s",
               p.items, p.records, static_cast<uint64_t>(records_per_s),
               p.elapsed_s);
}

void progress_display::finish() {
  std::lock_guard<std::mutex> guard{mtx_};
  if (terminal_ && line_shown_) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  }
  line_shown_ = false;
}

} // namespace af::cli
