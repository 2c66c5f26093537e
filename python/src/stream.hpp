// The engine side of actorflow.Pipeline.iterate(): a job that runs in this
// process, in an actor system of its own, under af::supervise (autotune,
// stopping and aborting, starting again after a lost node, as `actorflow
// run`), and hands the batches of one of its `outlet` stages to the thread
// that iterates.
//
// Credit is the Python side's consumption: a batch is answered (and the
// outlet may send one more) only when next() has handed it out, so at most
// `outlet { in_flight }` batches wait here however slow the training loop
// is. Batches are shared, never copied. Nothing here touches Python: the
// bindings (module.cpp) release the GIL around every call that waits.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "actorflow/runtime/core/batch.hpp"
#include "actorflow/runtime/job/job.hpp"
#include "actorflow/runtime/topology/topology.hpp"

namespace af::py {

struct stream_options {
  /// The outlet stage to read; "" = the topology's only one.
  std::string outlet;
  /// Stop after this many epochs, by the batches' epoch numbers; 0 = as the
  /// topology's sources say.
  int64_t epochs = 0;
  /// Scheduler threads; 0 = every core.
  size_t threads = 0;
};

class stream {
public:
  enum class status { batch, end, waiting };

  /// Starts the job. Throws std::invalid_argument when the outlet is not
  /// there (naming the outlets there are), std::runtime_error when the job
  /// cannot start (as af::job::start).
  stream(const loaded_topology& topo, const stream_options& opts);
  /// close(), bounded.
  ~stream();
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;

  /// The next batch into `out` (status::batch), the end of the job
  /// (status::end: see result()), or nothing within `timeout`
  /// (status::waiting). Blocks: call it without the GIL.
  status next(batch& out, std::chrono::milliseconds timeout);

  /// Ends the job early, draining it; the batches still to come are
  /// discarded. Does not block; only the first call does anything.
  void stop();

  /// stop(), then waits for the end (aborting the job after `limit`, and
  /// waiting `limit` again) and shuts the actor system down. After it,
  /// next() returns status::end. An actor system that does not shut down
  /// within `limit` more is left behind (a warning on stderr), so that the
  /// caller does not wait forever. Only the first call does anything.
  void close(std::chrono::milliseconds limit);

  /// The job's result once next() returned status::end or close() ran.
  run_result result() const;
  /// The latest progress report, if one came. Any thread, any time.
  std::optional<job_progress> progress() const;
  /// The outlet read.
  const std::string& outlet() const noexcept { return outlet_; }

  /// Internal: what the receiver actor and the iterating thread share.
  struct channel;

private:
  struct state;
  std::shared_ptr<state> current() const;
  void end_with(const run_result& r);

  // state_, result_ and ended_ may be used by two threads (one iterating,
  // one stopping or closing): guarded by mutex_.
  mutable std::mutex mutex_;
  std::shared_ptr<state> state_;
  std::shared_ptr<channel> channel_; // outlives state_: progress()
  std::string outlet_;
  int64_t epochs_ = 0;
  run_result result_;
  bool ended_ = false;
};

} // namespace af::py
