// TensorBoard event files (docs/monitoring.md).
//
// A file is TFRecord-framed (runtime/formats/tfrecord.hpp, no compression) and
// named events.out.tfevents.<10-digit seconds>.<host>.<pid>.actorflow, the
// pattern TensorBoard looks for. Its first record is the file-version event
// ("brain.Event:2"); every later record is one af::tf::Event
// (proto/event.proto, wire-compatible with TensorFlow's) holding scalars,
// a histogram or a SessionLog. Records are flushed as they are written, so
// TensorBoard sees a running job's curves.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "actorflow/runtime/core/histogram.hpp"

namespace af {

namespace tf {
class Event;
} // namespace tf

/// `payload` framed as one TFRecord: length, masked CRC of the length,
/// payload, masked CRC of the payload.
std::string tfrecord_frame(const std::string& payload);

/// The serialized file-version event an event file starts with.
std::string file_version_event(double wall_time);

class event_writer {
public:
  /// Creates `run_dir` (and its parents) and a new event file in it, and
  /// holds the run directory's lock (.actorflow-events.lock, flock): one
  /// writer per run directory. Throws std::runtime_error naming the path
  /// when the directory or file cannot be made or another process writes
  /// there.
  explicit event_writer(const std::string& run_dir);
  ~event_writer();
  event_writer(const event_writer&) = delete;
  event_writer& operator=(const event_writer&) = delete;

  const std::string& path() const noexcept { return path_; }

  /// One event at `step` with a scalar per (tag, value).
  void scalars(int64_t step,
               const std::vector<std::pair<std::string, double>>& values);
  /// One histogram event (runtime/core/histogram.hpp: summarize()).
  void histogram(const histogram_summary& h);
  /// SessionLog START at `step`: TensorBoard drops the events of steps
  /// >= step written before (a resumed job continues there).
  void session_start(int64_t step);

  /// Appends one event and flushes. Throws std::runtime_error on a write
  /// error.
  void write(const tf::Event& e);

private:
  void put(const std::string& record);

  std::string path_;
  std::FILE* file_ = nullptr;
  int lock_fd_ = -1;
};

} // namespace af
