// Connecting to nodes (runtime/job/node.hpp) through CAF's middleman: what
// remote_actor does, with a time limit. Internal, not installed: job::start
// connects to the nodes its topology places actors on (runtime/job/job.cpp),
// and the coordinator to the node it restores a lost service actor on
// (runtime/job/detail/recovery.cpp).
#pragma once

#include <chrono>
#include <string>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <caf/io/middleman_actor.hpp>

#include "actorflow/runtime/job/node.hpp"

namespace af {

/// The middleman actor that connects to nodes: the OpenSSL module's when
/// `sys` has loaded it (TLS with mutual certificate checks), else the plain
/// one. `sys` must have the middleman (caf::io::middleman).
caf::io::middleman_actor node_middleman(caf::actor_system& sys);

/// Asks node_middleman to connect to `addr` within `timeout`. The answer is
/// (caf::node_id, caf::strong_actor_ptr spawner, std::set<std::string>),
/// the spawner null when nothing is published there, or an error. `self` is
/// a caf::scoped_actor (take the answer with receive) or an event-based
/// actor (with then).
template <class Self>
auto request_node(Self& self, const node_address& addr,
                  std::chrono::milliseconds timeout) {
  return self->request(node_middleman(self->system()), timeout,
                       caf::connect_atom::value, addr.host, addr.port);
}

/// The spawner of the node `host` at `address` (Topology.host), waited for
/// by `self`. A handshake that CAF gave up on is tried again while
/// `timeout` lasts. Throws std::runtime_error naming the host and its
/// address when the address does not parse, the actor system has no
/// network, or the node cannot be reached; the message says what to check
/// (the node running, TLS on one side only, certificates).
node_spawner_actor connect_node(caf::scoped_actor& self,
                                const std::string& host,
                                const std::string& address,
                                std::chrono::milliseconds timeout);

} // namespace af
