// Compiled by tests/apps/typed_protocols.sh, once per CASE: the typed
// interfaces (runtime/protocol/stream.hpp, coordinator.hpp, service.hpp, ps.hpp,
// node.hpp) turn a message their table lacks into a compile error. CASE 0
// sends a row of each table and must compile; every other CASE sends one
// message that no table has and must fail with CAF's "receiver does not
// accept given message".
#include <cstdint>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/send.hpp>

#include "actorflow/runtime/job/node.hpp"
#include "actorflow/runtime/protocol/detail/coordinator.hpp"
#include "actorflow/runtime/protocol/ps.hpp"
#include "actorflow/runtime/protocol/service.hpp"
#include "actorflow/runtime/protocol/stream.hpp"

void sends(af::stage_actor replica, af::coordinator_actor coordinator,
           af::service_actor service, af::ps_shard_actor shard,
           af::node_spawner_actor spawner) {
  std::string text = "x";
  uint64_t n = 1;
#if CASE == 0
  caf::anon_send(replica, af::wire_atom::value, af::wiring{});
  caf::anon_send(replica, af::demand_atom::value, n, n, n);
  caf::anon_send(replica, std::vector<af::batch>{});
  caf::anon_send(replica, af::takeover_atom::value, uint32_t{1}, n);
  caf::anon_send(coordinator, af::checkpoint_atom::value, n, text, text, n,
                 true);
  caf::anon_send(coordinator, af::ps_lost_atom::value, text, uint32_t{0}, n);
  caf::anon_send(service, af::replica_lost_atom::value, text, uint32_t{0},
                 true);
  caf::anon_send(shard, af::replica_lost_atom::value, text, uint32_t{0});
  (void) spawner;
#elif CASE == 1
  // The coordinator's 4-argument replica_lost goes to services, not to
  // stage replicas.
  caf::anon_send(replica, af::replica_lost_atom::value, text, uint32_t{0},
                 true);
#elif CASE == 2
  // A replica's answer to a cut has 6 values; this is the question.
  caf::anon_send(coordinator, af::checkpoint_atom::value, n);
#elif CASE == 3
  // Credit without its acknowledgements (the protocol before 0.2).
  caf::anon_send(replica, af::demand_atom::value, n, n);
#elif CASE == 4
  caf::anon_send(service, af::replica_lost_atom::value, text);
#elif CASE == 5
  caf::anon_send(shard, af::ps_gone_atom::value, text);
#elif CASE == 6
  caf::anon_send(spawner, af::spawn_stage_atom::value, text);
#else
#error unknown CASE
#endif
}
