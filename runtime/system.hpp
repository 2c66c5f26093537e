// Setting up a caf::actor_system for the engine: its message types and the
// few CAF options the engine controls (worker threads, scheduler policy).
// CAF's own config parsing ignores unknown keys, so the engine parses its
// options itself (CLI11 in apps/, the topology's `runtime` block) and sets
// CAF's explicitly here.
#pragma once

#include <cstddef>
#include <string>

#include <caf/actor_system_config.hpp>

#include "proto/topology.pb.h"

namespace af {

struct engine_options {
  /// Scheduler worker threads; 0 = number of cores.
  size_t threads = 0;
  /// "sharing" (default: measured faster for stage chains on 2 cores, see
  /// docs/benchmarks.md) or "stealing".
  std::string scheduler = "sharing";
};

/// Registers every message type the runtime sends, under stable names, so
/// that they can cross hosts. Call once per actor_system_config.
void add_message_types(caf::actor_system_config& cfg);

/// Applies `opts` to `cfg` (scheduler.max-threads, scheduler.policy).
/// Throws std::invalid_argument on an unknown scheduler policy.
void apply(const engine_options& opts, caf::actor_system_config& cfg);

/// Loads CAF's middleman (remote actors over TCP) with heartbeats, so that
/// a frozen peer is noticed within seconds.
void enable_network(caf::actor_system_config& cfg);

/// The engine options a topology's `runtime` block asks for.
engine_options engine_options_of(const topology::Runtime& rt);

} // namespace af
