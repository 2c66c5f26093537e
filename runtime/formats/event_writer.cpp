// TensorBoard event files (docs/monitoring.md). Declared in
// runtime/formats/event_writer.hpp.
#include "actorflow/runtime/formats/event_writer.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <stdexcept>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "actorflow/proto/event.pb.h"
#include "actorflow/runtime/formats/crc32c.hpp"

namespace af {

namespace {

double now_s() {
  return std::chrono::duration<double>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

void put_le64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void put_le32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0')
    return "localhost";
  return buf;
}

} // namespace

std::string tfrecord_frame(const std::string& payload) {
  std::string out;
  out.reserve(payload.size() + 16);
  put_le64(out, payload.size());
  put_le32(out, masked_crc32c(out.data(), 8));
  out += payload;
  put_le32(out, masked_crc32c(payload.data(), payload.size()));
  return out;
}

std::string file_version_event(double wall_time) {
  tf::Event e;
  e.set_wall_time(wall_time);
  e.set_file_version("brain.Event:2");
  return e.SerializeAsString();
}

event_writer::event_writer(const std::string& run_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec)
    throw std::runtime_error(run_dir + ": cannot create the run directory: "
                             + ec.message());
  auto lock = (fs::path{run_dir} / ".actorflow-events.lock").string();
  lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0)
    throw std::runtime_error(lock + ": " + std::strerror(errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(lock_fd_);
    throw std::runtime_error(run_dir + ": another process is writing events "
                                       "there (one writer per run "
                                       "directory; choose another --logdir "
                                       "or job name)");
  }
  auto seconds = static_cast<long long>(std::time(nullptr));
  char stamp[16];
  std::snprintf(stamp, sizeof stamp, "%010lld", seconds);
  auto base = (fs::path{run_dir}
               / ("events.out.tfevents." + std::string{stamp} + "."
                  + host_name() + "." + std::to_string(::getpid())))
                .string();
  // A second writer of this process within the same second: .1, .2...
  for (int n = 0; n < 1000 && file_ == nullptr; ++n) {
    path_ = base;
    if (n > 0) {
      path_ += '.';
      path_ += std::to_string(n);
    }
    path_ += ".actorflow";
    file_ = std::fopen(path_.c_str(), "wbx");
    if (file_ == nullptr && errno != EEXIST)
      break;
  }
  if (file_ == nullptr) {
    auto why = std::string{std::strerror(errno)};
    ::close(lock_fd_);
    throw std::runtime_error(path_ + ": cannot create: " + why);
  }
  put(tfrecord_frame(file_version_event(now_s())));
}

event_writer::~event_writer() {
  if (file_ != nullptr)
    std::fclose(file_);
  if (lock_fd_ >= 0)
    ::close(lock_fd_); // (releases the lock)
}

void event_writer::put(const std::string& record) {
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size()
      || std::fflush(file_) != 0)
    throw std::runtime_error(path_ + ": write failed: " + std::strerror(errno));
}

void event_writer::write(const tf::Event& e) {
  put(tfrecord_frame(e.SerializeAsString()));
}

void event_writer::scalars(
  int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  if (values.empty())
    return;
  tf::Event e;
  e.set_wall_time(now_s());
  e.set_step(step);
  auto* summary = e.mutable_summary();
  for (auto& [tag, value] : values) {
    auto* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  write(e);
}

void event_writer::histogram(const histogram_summary& hs) {
  tf::Event e;
  e.set_wall_time(now_s());
  e.set_step(hs.step);
  auto* v = e.mutable_summary()->add_value();
  v->set_tag(hs.tag);
  auto* h = v->mutable_histo();
  h->set_min(hs.min);
  h->set_max(hs.max);
  h->set_num(hs.num);
  h->set_sum(hs.sum);
  h->set_sum_squares(hs.sum_squares);
  for (size_t b = 0; b < hs.limits.size() && b < hs.counts.size(); ++b) {
    h->add_bucket_limit(hs.limits[b]);
    h->add_bucket(hs.counts[b]);
  }
  write(e);
}

void event_writer::session_start(int64_t step) {
  tf::Event e;
  e.set_wall_time(now_s());
  e.set_step(step);
  e.mutable_session_log()->set_status(tf::SessionLog::START);
  write(e);
}

} // namespace af
