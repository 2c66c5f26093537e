// Counters every stage replica keeps and reports to its coordinator: the
// protocol's own view of each edge (tests assert on these) and where the
// replica's time went.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

#include "actorflow/runtime/core/histogram.hpp"
#include "actorflow/runtime/protocol/metric_names.hpp"

namespace af {

/// The producer's side of one outgoing edge.
struct edge_stats {
  std::string peer;
  uint64_t window = 0;
  uint64_t byte_budget = 0;
  uint64_t items_sent = 0;
  uint64_t bytes_sent = 0;
  uint64_t max_in_flight_items = 0;
  uint64_t max_in_flight_bytes = 0;
  uint64_t lost_items = 0; // in flight when the peer went down
  /// Sent again to the other replicas when the peer went down
  /// (downstream_edge::resend): it had not finished them.
  uint64_t resent_items = 0;
  /// The consumer runs on another node: bytes_sent crossed the network.
  bool remote = false;
  /// The consumer went down (or was lost): the edge is gone. A consumer
  /// respawned under the same name gets a new edge.
  bool closed = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, edge_stats& x) {
  return f(caf::meta::type_name("af::edge_stats"), x.peer, x.window,
           x.byte_budget, x.items_sent, x.bytes_sent, x.max_in_flight_items,
           x.max_in_flight_bytes, x.lost_items, x.resent_items, x.remote,
           x.closed);
}

/// A named value a stage reports about its own work (a trainer's loss,
/// an evaluator's accuracy); shown in progress lines and the report.
struct metric {
  std::string name;
  double value = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, metric& x) {
  return f(caf::meta::type_name("af::metric"), x.name, x.value);
}

/// A value that belongs to a step of its own rather than to the moment it
/// is reported (an evaluation's test loss at the step it evaluated):
/// TensorBoard gets each once, at `step`.
struct scalar_event {
  std::string name; // as the stage's metric of the same value: "test_loss"
  int64_t step = 0;
  double value = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, scalar_event& x) {
  return f(caf::meta::type_name("af::scalar_event"), x.name, x.step,
           x.value);
}

struct stage_stats {
  std::string stage; // "name[replica]"
  std::string stage_name;
  uint32_t replica = 0;
  bool is_sink = false;
  uint64_t items_in = 0;
  uint64_t records_in = 0;
  uint64_t bytes_in = 0;
  uint64_t items_out = 0;
  uint64_t records_out = 0;
  uint64_t bytes_out = 0;
  // Seconds spent in the stage's own code, waiting for input (nothing to
  // do), and waiting for credit (output ready, no consumer can take it).
  double busy_s = 0;
  double wait_input_s = 0;
  double wait_credit_s = 0;
  std::vector<edge_stats> out_edges;
  /// The stage logic's own metrics (stage_logic::metrics).
  std::vector<metric> metrics;
  /// Epochs whose end was sent downstream.
  uint64_t epochs_ended = 0;
  /// Histograms made since the previous report (stage_logic::
  /// take_histograms).
  std::vector<histogram_summary> histograms;
  /// Step-stamped values made since the previous report
  /// (stage_logic::take_scalars).
  std::vector<scalar_event> scalars;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stage_stats& x) {
  return f(caf::meta::type_name("af::stage_stats"), x.stage, x.stage_name,
           x.replica, x.is_sink, x.items_in, x.records_in, x.bytes_in,
           x.items_out, x.records_out, x.bytes_out, x.busy_s, x.wait_input_s,
           x.wait_credit_s, x.out_edges, x.metrics, x.epochs_ended,
           x.histograms, x.scalars);
}

} // namespace af
