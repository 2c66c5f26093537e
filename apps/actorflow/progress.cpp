#include "apps/actorflow/progress.hpp"

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
