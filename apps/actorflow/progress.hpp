// The live progress display of `actorflow run`: one line rewritten in place
// on a terminal, a log line every few seconds otherwise.
#pragma once

#include <chrono>
#include <mutex>
#include <optional>
#include <string>

#include "actorflow/runtime/job/job.hpp"
#include "actorflow/runtime/topology/topology.hpp"

namespace af::cli {

class progress_display {
public:
  /// `terminal`: rewrite one line on stderr; else log every `log_every`.
  /// With the job's topology, training lines show the share done and an
  /// ETA once the records the trainers will take are known.
  progress_display(bool terminal, std::chrono::seconds log_every,
                   const topology::Topology* spec = nullptr);
  /// The topology as it runs (after autotune), before the job starts.
  void set_topology(const topology::Topology* spec) {
    spec_ = spec;
  }
  /// Called by the job's coordinator.
  void update(const job_progress& p);
  /// Clears the live line (before the summary is printed).
  void finish();

private:
  std::mutex mtx_;
  bool terminal_;
  const topology::Topology* spec_;
  bool line_shown_ = false;
  // The previous update, for the current rate (counts lag the clock by up
  // to one stats interval, so an average since the start reads low).
  double last_elapsed_ = 0;
  uint64_t last_records_ = 0;
  uint64_t last_bytes_ = 0;
  std::chrono::seconds log_every_;
  std::chrono::steady_clock::time_point last_log_;
};

/// What the trainers and the evaluator report (their stage metrics),
/// summed or combined over the replicas.
struct training_view {
  bool training = false; // some stage reports "step"
  double epoch = 0;      // 1-based, the furthest trainer
  double steps = 0, samples = 0, samples_per_s = 0;
  double samples_resumed = 0; // of samples: restored from a checkpoint
  double loss = 0;       // mean of the trainers' epoch losses
  double staleness_max = 0, skipped = 0;
  bool evaluated = false;
  double eval_step = 0, test_loss = 0, test_accuracy = -1, test_auc = -1,
         reference_auc = -1;
};
training_view training_of(const job_progress& p);

/// The records the trainers take over the whole job, when the stages that
/// feed them know it: from each trainer stage up through stages that pass
/// every record on (batcher, shuffle, example_parse, image_decode) to
/// stages that report their records_total metric (sources, the cache) from
/// every replica. nullopt while unknown (a tfrecord_source knows after its
/// first epoch, a cache after its first pass) or when another stage type
/// is on the way (take, transform...).
std::optional<double> expected_training_records(const topology::Topology& spec,
                                                const job_progress& p);

/// "42 s", "3m05s", "2h07m".
std::string human_duration(double seconds);

/// "1.23 M", "456.7 k", "12": compact counts for the progress line.
std::string human_count(double v);
/// "12.3 MB", "1.50 GB".
std::string human_bytes(double v);

} // namespace af::cli
