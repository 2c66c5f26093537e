// A bound on the time a process spends shutting down: `actorflow run`,
// `actorflow node`, and any application that wants the same guarantee. Once a job has ended (or a node was told to stop), the process
// must exit: CAF 0.17's ~actor_system() waits without limit for every
// actor (and every detached actor's object), and a reference that is never
// released, or a TLS handshake with a silent peer (CAF issue #1060), would
// keep it alive for good, deaf to signals.
#pragma once

#include <atomic>
#include <chrono>

#include <caf/fwd.hpp>

namespace af {

/// Starts the clock on the shutdown: from now on the process exits with
/// `rc` (std::_Exit, stdout and stderr flushed) after `limit`, or as soon
/// as `signals` counts a signal that arrived after this call, whichever
/// comes first; before it does, it logs the actors that still exist
/// (census_alive()). A normal exit before then ends the watch with the
/// process. Only the first call has an effect. Does not throw.
void bound_shutdown(int rc, std::chrono::milliseconds limit,
                    const std::atomic<int>& signals);

/// Waits (at most half of `limit`) until every actor of the census
/// (runtime/core/census.hpp) has exited, so that their last messages, down
/// messages to other nodes included, leave while the actor system still
/// runs; call it right before the actor system is destroyed. Logs the
/// actors that have not exited by then. Does not throw.
void await_exits(std::chrono::milliseconds limit);

/// The failpoint shutdown.stall (runtime/testing/failpoint.hpp), for tests of the
/// bound: when AF_FAILPOINT asks for it, leaves a detached actor of `sys`
/// with a strong reference that is never released, as the bug that hung
/// `actorflow run` after a lost node did. Does not throw.
void stall_if_asked(caf::actor_system& sys);

} // namespace af
