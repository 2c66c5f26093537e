// Nodes: what `actorflow node` runs, and how a coordinator places stage
// replicas and service actors on one. A node publishes a spawner actor on
// its address; the coordinator (job::start) connects to it through CAF's
// middleman and asks it, with ordinary messages, to create actors from the
// same topology text. Every other message (items, credit, markers, the
// parameter-server protocol) then travels between the actors as it does in
// one process: nothing in a stage knows whether its peer is remote.
//
//   coordinator -> spawner
//     (spawn_stage_atom, topology_text, stage_index, replica, coordinator,
//      service_names, service_actors)                        -> caf::actor
//     (spawn_service_atom, topology_text, service, index, coordinator)
//                                                             -> caf::actor
//     (node_info_atom)                                        -> std::string
//     (data_plane_atom, secret)                               -> uint16_t
//         accept data-plane connections that show this job's secret; the
//         answer is the node's data port (0: it has no data plane, as with
//         TLS)
//     (data_routes_atom, routes)            -> std::vector<std::string>
//         where the other nodes' data ports are; the node dials each now,
//         and the answer lists those it cannot reach ("n3: cannot connect
//         to 127.0.0.1:4300: Connection refused")
//
// topology_text, service: std::string; stage_index, replica, index:
// uint32_t; coordinator: caf::actor; secret: std::string; routes:
// std::vector<af::data_route> (runtime/net/data_plane.hpp); service_names:
// std::vector<std::string>
// and service_actors: std::vector<caf::actor>, side by side. The answers are
// the new stage replica or service actor (an af::service_actor); the
// handles travel untyped, as the rest of the job holds them.
// node_spawner_actor (below) is this table as a type.
//
// The spawner monitors every coordinator it served and kills the actors it
// created for one when that coordinator goes down, so that a node is ready
// for the next job even when a coordinator dies. Stage replicas also end
// themselves when their coordinator goes down (runtime/stage/stage.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/atom.hpp>
#include <caf/fwd.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actorflow/runtime/net/address.hpp"
#include "actorflow/runtime/net/data_plane.hpp"
#include "actorflow/runtime/stage/registry.hpp"
#include "actorflow/runtime/stage/stage.hpp"

namespace af {

using spawn_stage_atom = caf::atom_constant<caf::atom("af_spwst")>;
using spawn_service_atom = caf::atom_constant<caf::atom("af_spwsv")>;
using node_info_atom = caf::atom_constant<caf::atom("af_ninfo")>;
using data_plane_atom = caf::atom_constant<caf::atom("af_dplane")>;
using data_routes_atom = caf::atom_constant<caf::atom("af_droutes")>;

/// The spawner's interface (the table above). Its down messages (the
/// coordinators it monitors) are CAF system messages, no part of a typed
/// interface in CAF 0.17: it takes them with set_down_handler.
using node_spawner_actor = caf::typed_actor<
  caf::replies_to<spawn_stage_atom, std::string, uint32_t, uint32_t,
                  caf::actor, std::vector<std::string>,
                  std::vector<caf::actor>>::with<caf::actor>,
  caf::replies_to<spawn_service_atom, std::string, std::string, uint32_t,
                  caf::actor>::with<caf::actor>,
  caf::replies_to<node_info_atom>::with<std::string>,
  caf::replies_to<data_plane_atom, std::string>::with<uint16_t>,
  caf::replies_to<data_routes_atom, std::vector<data_route>>::with<
    std::vector<std::string>>>;

/// The spawner of a node: creates stage replicas and service actors for
/// coordinators. `reg` must outlive it. A request it cannot serve (an
/// unknown stage type, a factory that throws) is answered with an error
/// (caf::sec::runtime_error, the message naming the replica), which fails
/// that job's start; the spawner goes on. Publish it on a port
/// (sys.middleman().publish) for coordinators to reach it; stop it with an
/// exit message. The handle is a node_spawner_actor's, untyped: what
/// coordinators connect to is published as a caf::actor.
caf::actor spawn_node_spawner(caf::actor_system& sys, const registry& reg);

/// Creates the logic of replica `replica` of stage `stage_index` (a valid
/// index of `spec.stage`, unchecked) and spawns it, as a job does in its own
/// process (runtime/job/job.cpp) and a node does on request; the replica then
/// waits for its wiring (internal: applications use job::start). Throws
/// std::runtime_error naming the replica when the stage type is unknown or
/// its factory fails. `reg` and `spec` are read during the call only.
caf::actor spawn_replica(caf::actor_system& sys, const registry& reg,
                         const topology::Topology& spec, int stage_index,
                         uint32_t replica,
                         std::shared_ptr<const job_context> context,
                         caf::actor coordinator);

} // namespace af
