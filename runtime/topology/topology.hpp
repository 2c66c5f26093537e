// Loading and validating topology files (protobuf text format, schema in
// proto/topology.proto). Every problem is reported as `file:line: message`;
// the loader collects all of them rather than stopping at the first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actorflow/proto/topology.pb.h"
#include "actorflow/runtime/stage/registry.hpp"

namespace af {

/// Topology files larger than this are refused before parsing.
constexpr size_t max_topology_bytes = 16u << 20;

/// Defaults for optional fields (docs/topology.md repeats them).
constexpr int64_t default_window = 8;
constexpr int64_t default_replicas = 1;
constexpr double default_metrics_interval_s = 0.5;

struct topology_error {
  std::string file;
  int line = 0; // 1-based; 0 when the problem has no line (unreadable file)
  std::string message;
  /// "file:line: message", or "file: message" without a line.
  std::string to_string() const;
};

/// A topology that passed validation.
struct loaded_topology {
  std::string file;
  topology::Topology spec;
  /// Stage indexes in an order where every stage comes after its inputs.
  std::vector<size_t> order;
  /// 1-based line on which each stage starts.
  std::vector<int> stage_line;
};

struct load_result {
  std::optional<loaded_topology> topology;
  std::vector<topology_error> errors; // sorted by line
  bool ok() const noexcept { return topology.has_value(); }
};

/// Reads, parses and validates `path`. Every problem (unreadable file, syntax,
/// unknown type, a stage type's or whole-topology check, including one that
/// threw) comes back in load_result::errors; does not throw (std::bad_alloc
/// aside). `reg` is used during the call only.
load_result load_topology_file(const std::string& path, const registry& reg);

/// Parses and validates `text`, as load_topology_file; `name` stands for the
/// file in messages.
load_result load_topology_text(std::string_view text, const std::string& name,
                               const registry& reg);

/// Effective values of optional fields (defaults filled in; values are
/// checked only when the topology is loaded).
int64_t replicas_of(const topology::Stage& s);
/// Stage.max_replicas, or replicas when unset (not elastic).
int64_t max_replicas_of(const topology::Stage& s);
int64_t window_of(const topology::Input& in);

} // namespace af
