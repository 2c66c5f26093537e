// The summary `actorflow run` prints when a job ends.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "actorflow/runtime/job/job.hpp"

namespace af::cli {

/// One stage of a job's final report: its replicas summed.
struct stage_row {
  std::string name;
  int replicas = 0;
  uint64_t in = 0, out = 0;
  double busy_s = 0, wait_in_s = 0, wait_credit_s = 0;
  /// Of busy_s, waiting for a step slot (trainer { concurrent_steps }).
  double slot_wait_s = 0;
  /// Shares of the replicas' time (0..1).
  double share(double part) const {
    auto total = busy_s + wait_in_s + wait_credit_s;
    return total > 0 ? part / total : 0.0;
  }
};

/// The rows of `p`'s stages, in topology order.
std::vector<stage_row> stage_rows(const job_progress& p);

/// The stage that holds the job back: the busiest one, if it is busy at
/// least half its time ("" otherwise), and a hint of what would help.
struct bottleneck {
  std::string stage;
  std::string hint;
};
bottleneck find_bottleneck(const std::vector<stage_row>& rows);

/// A trainer stage's step-time breakdown (trainer { timing_every_steps },
/// docs/training.md): each field the mean over its replicas' timed steps,
/// in milliseconds per step (device_busy a share, 0..1).
struct step_time_row {
  std::string stage;
  double timed_steps = 0;
  double step = 0, prepare = 0, slot_wait = 0, pull = 0, param_h2d = 0,
         input_wait = 0,
         input_h2d = 0, compute = 0, compute_host = 0, push = 0,
         grad_d2h = 0, gap = 0, device_busy = 0;
  double input_in_place = 0; // share of batches read in the GPU's memory
};

/// One row per stage whose replicas reported timed steps.
std::vector<step_time_row> step_time_rows(const job_progress& p);

/// One trainer replica's use of its time, the seed's "GPU utilization":
/// shares (0..1) of the time the replica accounted (busy + waiting).
/// `busy` includes `param_wait` (a trainer waits for its pulls inside its
/// step) and `slot_wait` (waiting for a step slot, trainer {
/// concurrent_steps }; -1 when the stage has no such bound);
/// `input_wait` is the time with no batch to train.
struct utilization_row {
  std::string replica; // "train[0]"
  double busy = 0, param_wait = 0, input_wait = 0, slot_wait = -1;
};

/// One row per replica that reports wait_params_s (the trainers).
std::vector<utilization_row> utilization_rows(const job_progress& p);

/// Totals, throughput, one row per stage (replicas summed) and the
/// bottleneck line.
void print_summary(std::FILE* out, const std::string& job_name,
                   const run_result& r);

/// The same as JSON (`actorflow run --report-json FILE`, docs/monitoring.md).
void write_report_json(std::FILE* out, const std::string& job_name,
                       const run_result& r);

} // namespace af::cli
