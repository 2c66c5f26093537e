// Placing a job again after one of its nodes was lost
// (run_result::recoverable): which of its hosts answer now, and its
// topology with the hosts that do not left out of every placement that has
// another host (docs/multi-host.md, "Restarting after a lost node").
#pragma once

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <caf/fwd.hpp>

#include "actorflow/proto/topology.pb.h"
#include "actorflow/runtime/stage/registry.hpp"

namespace af {

/// Whether a TCP connection to `address` ("HOST:PORT") opens within
/// `timeout`, on a socket of our own: CAF 0.17's middleman connects
/// blocking, in its one actor, so a host that drops packets (a dead VM, a
/// cut link) would hold it for the kernel's connect timeout (minutes), and
/// every later connect with it. "" when it opens, else why not. Blocks the
/// calling thread up to `timeout`.
std::string tcp_probe(const std::string& address,
                      std::chrono::milliseconds timeout);

/// The hosts `spec` places stages or shards on, each once, in the order
/// the `host` entries define them.
std::vector<std::string> placement_hosts(const topology::Topology& spec);

/// Those of placement_hosts(spec) that cannot be connected to (TCP, TLS
/// when `sys` has it, and CAF's handshake) within `timeout` each, with why.
/// A frozen process accepts TCP but never answers: `timeout` bounds it.
std::vector<std::pair<std::string, std::string>>
unreachable_hosts(caf::actor_system& sys, const topology::Topology& spec,
                  std::chrono::milliseconds timeout);

/// `spec` with the hosts in `down` left out of every stage's `hosts` and
/// of training.ps.hosts; replica r of a stage then runs on the r % n-th of
/// the hosts left. nullopt when a placement names only hosts in `down`;
/// `why` then names it ("stage 'batch': every host of it is down (w2)").
std::optional<topology::Topology>
place_without(const topology::Topology& spec, const std::set<std::string>& down,
              std::string& why);

/// "batch[0] from host 'w2' to 'w3'" for every stage replica and service
/// actor that `after` places on another host than `before` does.
std::vector<std::string> moved_replicas(const topology::Topology& before,
                                        const topology::Topology& after,
                                        const registry& reg);

} // namespace af
