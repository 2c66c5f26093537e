// A job's numbers as TensorBoard scalars, written by a metrics actor
// (docs/monitoring.md).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/atom.hpp>
#include <caf/fwd.hpp>

#include "actorflow/runtime/job/job.hpp"
#include "actorflow/runtime/protocol/stage_stats.hpp"

namespace af {

/// Bytes that crossed the network so far: batches on edges to stages on
/// other nodes, and parameters and gradients between trainers and shards
/// on other nodes (tensor data; CAF's framing not counted).
uint64_t network_bytes_of(const job_progress& p);

/// Turns successive job_progress snapshots into scalars (tag, value):
///   stage/<stage>/items_per_s      items out (sinks: in) per second
///   stage/<stage>/busy             share of the replicas' time in the
///                                  stage's own code, 0..1
///   stage/<stage>/input_wait       ... waiting for input
///   stage/<stage>/credit_wait      ... waiting for credit
///   stage/<stage>/replicas         replicas reporting
///   stage/<stage>/window           largest window of its output edges
///   <stage>/<metric>               the stage's own metrics over its
///                                  replicas: counts and rates summed
///                                  (step, samples, samples_per_s...),
///                                  staleness_max the largest, the others
///                                  (loss, test_accuracy...) the mean
///   job/records_per_s, job/bytes_per_s   at the sinks
///   stage/<trainer>[<r>]/busy, param_wait, input_wait, slot_wait
///                                  each trainer replica's shares of its
///                                  time (slot_wait with concurrent_steps)
///   job/network_bytes, job/network_bytes_per_s   network_bytes_of()
///   job/coordinator_bytes          job_progress::coordinator_bytes
/// Rates cover the time since the previous snapshot. The step is the
/// trainers' steps summed (the global step), else the records at the sinks.
class progress_scalars {
public:
  /// `first_step`: a resumed job's step; no scalar goes before it.
  explicit progress_scalars(int64_t first_step = 0)
    : first_step_(first_step) {}

  std::vector<metric> next(const job_progress& p, int64_t& step);

  /// For TensorBoard: `p`'s step-stamped values (job_progress::scalars,
  /// each to be written at its own step), and removes from `values` (what
  /// next() made of `p`) every metric such values have stood for so far, so
  /// that a tag is written once per value, with steps that never go back.
  std::vector<scalar_event> events(const job_progress& p,
                                   std::vector<metric>& values);

private:
  int64_t first_step_;
  struct totals {
    uint64_t items = 0;
    double busy_s = 0, input_s = 0, credit_s = 0;
  };
  double last_elapsed_ = 0;
  uint64_t last_records_ = 0, last_bytes_ = 0, last_network_ = 0;
  std::map<std::string, totals> last_; // by stage
  struct replica_totals {
    double busy_s = 0, input_s = 0, credit_s = 0, params_s = 0,
           slot_s = 0;
  };
  std::map<std::string, replica_totals> last_replica_; // trainers, by label
  std::set<std::string> event_tags_;   // written by events() only
};

/// (metrics_atom, step, std::vector<metric>,
/// std::vector<histogram_summary>, last): scalars at `step` and histograms
/// (each at its own step) for the metrics actor; `last`: the job's final
/// numbers, after which it quits (its exit tells that they are written).
/// (metrics_atom, std::vector<scalar_event>): each value at its own step.
using metrics_atom = caf::atom_constant<caf::atom("af_metric")>;

/// A detached actor that writes each (metrics_atom, ...) message as one
/// scalar event and one event per histogram into a new event file in
/// `run_dir`
/// (runtime/formats/event_writer.hpp); a resumed job (`resumed_step`) starts with
/// SessionLog START at that step. Throws std::runtime_error when the file
/// cannot be made (another writer holds the run directory...).
caf::actor spawn_event_writer(caf::actor_system& sys,
                              const std::string& run_dir,
                              std::optional<uint64_t> resumed_step);

} // namespace af
