// The service protocol: what a job's coordinator sends every service actor
// (registry.hpp's service_type; the parameter-server shards are the
// service "ps", runtime/protocol/ps.hpp), and what a service must answer.
//
//   coordinator -> service   (service_snapshot_atom)            -> std::string
//       a checkpoint round: the service's part of the checkpoint
//   coordinator -> service   (service_restore_atom, std::string) -> uint64_t
//       --resume (job::start, before any stage), and a lost service actor's
//       replacement: load what a snapshot returned; the answer is the
//       service's version (the PS shards': updates applied)
//   coordinator -> service   (replica_lost_atom, stage, replica)
//       a replica the job goes on without (stage_type::replicas_may_fail)
//   coordinator -> service   (replica_lost_atom, stage, replica, ended)
//       to a replacement, before anyone is given it: each replica that has
//       ended (ended = true) or is lost (false)
//
// stage: std::string; replica: uint32_t; ended: bool.
//
// A snapshot or restore the service cannot serve is answered with a
// caf::error, which abandons that checkpoint round or fails the restore.
#pragma once

#include <cstdint>
#include <string>

#include <caf/atom.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

namespace af {

// The atoms' text says "ps": the shards were the first service, and the text
// is what travels between nodes.
using service_snapshot_atom = caf::atom_constant<caf::atom("ps_snap")>;
using service_restore_atom = caf::atom_constant<caf::atom("ps_rest")>;
/// A service may not see the replica go down itself: across hosts, two
/// nodes may only be connected through the coordinator's.
using replica_lost_atom = caf::atom_constant<caf::atom("af_lost")>;

/// The interface every service actor implements (the table above).
using service_actor = caf::typed_actor<
  caf::replies_to<service_snapshot_atom>::with<std::string>,
  caf::replies_to<service_restore_atom, std::string>::with<uint64_t>,
  caf::reacts_to<replica_lost_atom, std::string, uint32_t>,
  caf::reacts_to<replica_lost_atom, std::string, uint32_t, bool>>;

} // namespace af
