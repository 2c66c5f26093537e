// `actorflow run --metrics-port PORT`: the numbers the TensorBoard writer
// gets (actors/training/tensorboard_writer.hpp, progress_scalars) as Prometheus gauges over
// HTTP on 127.0.0.1 (cpp-httplib serves what prometheus-cpp's text
// serializer writes; docs/monitoring.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actorflow/runtime/protocol/stage_stats.hpp"

namespace af::cli {

/// Scalar tag -> Prometheus name and labels:
///   "stage/<s>/<m>"      -> actorflow_stage_<m>{stage="<s>"}
///   "stage/<s>[<r>]/<m>" -> actorflow_replica_<m>{stage="<s>",replica="<r>"}
///                           (one replica's share; its own name, so that
///                           summing actorflow_stage_<m> over stages does
///                           not count the stage twice)
///   "job/<m>"            -> actorflow_job_<m>
///   "<s>/<m>"            -> actorflow_<m>{stage="<s>"}
/// Characters Prometheus does not allow in a name become '_'.
struct prometheus_name {
  std::string name, stage, replica; // replica: empty when not a replica's
};
prometheus_name prometheus_name_of(const std::string& tag);

class metrics_endpoint {
public:
  /// Listens on 127.0.0.1:`port` (0: a free port). Throws
  /// std::runtime_error naming the address when it cannot listen there.
  explicit metrics_endpoint(uint16_t port);
  ~metrics_endpoint();
  metrics_endpoint(const metrics_endpoint&) = delete;
  metrics_endpoint& operator=(const metrics_endpoint&) = delete;

  /// The port it listens on.
  uint16_t port() const;
  /// Replaces what a scrape returns: the global step (actorflow_step) and
  /// `values`. Thread-safe.
  void update(int64_t step, const std::vector<metric>& values);

private:
  struct state;
  std::unique_ptr<state> state_;
};

} // namespace af::cli
