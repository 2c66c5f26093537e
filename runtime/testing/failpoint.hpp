// Failpoints: named places where a test can make the process die, to
// check what the rest of a job does when a node is lost at that exact
// moment (tests/apps/resilience_test.sh). Off unless the environment says:
//
//   AF_FAILPOINT=NAME      the first time the process passes NAME
//   AF_FAILPOINT=NAME:N    the N-th time
//
// the failure named NAME happens there. Names:
//   ps.push.before  a PS client is about to send a step's gradients
//   ps.push.sent    ... has sent them (not yet acknowledged)
//   ps.push.acked   ... has the acknowledgements of a step's push
//     (these three: the process logs "failpoint NAME (hit N): killing this
//     process" and sends itself SIGKILL, as a crash or a lost host would)
//   data_plane.cut  a data-plane connection delivered a frame: the
//     connection is closed as broken, as a cut link would end it, while
//     the process and its CAF connections live on
//     (runtime/net/data_plane.hpp)
//   shutdown.stall  `actorflow run`/`node` begin their shutdown: an actor
//     is left with a reference that is never released, so CAF's
//     ~actor_system() would wait for it forever (what the shutdown bound,
//     runtime/job/shutdown.hpp, is for)
#pragma once

#include <string_view>

namespace af {

/// True when this pass of `name` is the one AF_FAILPOINT asks to fail (the
/// caller then fails). Costs one comparison when AF_FAILPOINT names
/// another place or is unset. Thread-safe; does not throw.
bool failpoint_hit(std::string_view name);

/// Kills the process (SIGKILL, after a line on stderr) when
/// failpoint_hit(name). Thread-safe; does not throw.
void failpoint(std::string_view name);

} // namespace af
