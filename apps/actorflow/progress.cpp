#include "apps/actorflow/progress.hpp"

#include <algorithm>
#include <cstdio>

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
    double step = -1, epoch = 0, samples = 0, rate = 0, loss = 0, stale = 0,
           skipped = 0;
    for (auto& m : s.metrics) {
      if (m.name == "step")
        step = m.value;
      else if (m.name == "epoch")
        epoch = m.value;
      else if (m.name == "samples")
        samples = m.value;
      else if (m.name == "samples_per_s")
        rate = m.value;
      else if (m.name == "loss")
        loss = m.value;
      else if (m.name == "staleness_max")
        stale = m.value;
      else if (m.name == "skipped_steps")
        skipped = m.value;
      else if (m.name == "eval_step") {
        t.evaluated = true;
        t.eval_step = m.value;
      } else if (m.name == "test_loss")
        t.test_loss = m.value;
      else if (m.name == "test_accuracy")
        t.test_accuracy = m.value;
      else if (m.name == "test_auc")
        t.test_auc = m.value;
      else if (m.name == "reference_auc")
        t.reference_auc = m.value;
    }
    if (step < 0)
      continue;
    t.training = true;
    ++trainers;
    t.epoch = std::max(t.epoch, epoch + 1);
    t.steps += step;
    t.samples += samples;
    t.samples_per_s += rate;
    t.loss += loss;
    t.staleness_max = std::max(t.staleness_max, stale);
    t.skipped += skipped;
  }
  if (trainers > 0)
    t.loss /= trainers;
  return t;
}

namespace {

std::string training_line(const training_view& t) {
  char buf[256];
  int n = std::snprintf(buf, sizeof buf,
                        "epoch %.0f | step %.0f | loss %.4f | %s samples/s",
                        t.epoch, t.steps, t.loss,
                        human_count(t.samples_per_s).c_str());
  if (t.evaluated && n > 0 && static_cast<size_t>(n) < sizeof buf) {
    if (t.test_accuracy >= 0)
      std::snprintf(buf + n, sizeof buf - static_cast<size_t>(n),
                    " | test accuracy %.4f", t.test_accuracy);
    else if (t.test_auc >= 0)
      std::snprintf(buf + n, sizeof buf - static_cast<size_t>(n),
                    " | test AUC %.4f", t.test_auc);
  }
  return buf;
}

} // namespace

progress_display::progress_display(bool terminal, std::chrono::seconds every)
  : terminal_(terminal), log_every_(every),
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
  if (terminal_ && training.training) {
    std::fprintf(stderr, "\r\033[K%s | %.1f s",
                 training_line(training).c_str(), p.elapsed_s);
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
    spdlog::info("progress: {}, {:.1f} s", training_line(training),
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
