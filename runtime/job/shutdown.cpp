// The bounded shutdown (runtime/job/shutdown.hpp): a watchdog thread that
// ends the process, and the wait for the census's actors to exit.
#include "actorflow/runtime/job/shutdown.hpp"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actorflow/runtime/core/census.hpp"
#include "actorflow/runtime/testing/failpoint.hpp"

namespace af {
namespace {

// The watchdog may fire while main() returns and the statics (spdlog's
// registry, the census) are destroyed: then it must not touch them. An
// atexit handler, registered after they were made and so run before they
// go, marks that moment under `leave_mtx`; exit_now holds the lock from
// its check until _Exit, so the two never overlap.
std::mutex leave_mtx;
bool leaving = false;

void mark_leaving() {
  std::lock_guard<std::mutex> g(leave_mtx);
  leaving = true;
}

[[noreturn]] void exit_now(int rc, const std::string& why) {
  leave_mtx.lock(); // never unlocked: the process ends here
  if (leaving)
    std::_Exit(rc);
  std::fflush(stdout);
  auto alive = census_alive();
  std::fprintf(stderr, "actorflow: %s; exiting with %d\n", why.c_str(), rc);
  if (alive.empty())
    std::fprintf(stderr, "actorflow: no job actor is left (CAF's own "
                         "threads were still stopping)\n");
  for (auto& line : alive)
    std::fprintf(stderr, "actorflow:   still there: %s\n", line.c_str());
  spdlog::default_logger()->flush();
  std::fflush(stderr);
  std::_Exit(rc);
}

} // namespace

void bound_shutdown(int rc, std::chrono::milliseconds limit,
                    const std::atomic<int>& signals) {
  static std::atomic<bool> armed{false};
  if (armed.exchange(true))
    return;
  spdlog::default_logger(); // made before mark_leaving is registered
  census_alive();
  std::atexit(mark_leaving);
  auto seen = signals.load();
  auto deadline = std::chrono::steady_clock::now() + limit;
  try {
    std::thread{[rc, limit, seen, deadline, &signals] {
      for (;;) {
        std::this_thread::sleep_for(std::chrono::milliseconds{20});
        if (signals.load() > seen)
          exit_now(rc, "interrupted while shutting down");
        if (std::chrono::steady_clock::now() >= deadline)
          exit_now(rc, fmt::format("shutdown did not finish within {:g} s "
                                   "(--shutdown-timeout)",
                                   limit.count() / 1000.0));
      }
    }}.detach();
  } catch (const std::system_error&) {
    // No thread: the shutdown goes unwatched (it usually finishes).
  }
}

void await_exits(std::chrono::milliseconds limit) {
  try {
    auto left =
      census_await_exits(std::chrono::steady_clock::now() + limit / 2);
    for (auto& label : left)
      spdlog::warn("shutdown: {} has not exited yet", label);
  } catch (const std::bad_alloc&) {
    // Nothing to wait with: the bound still ends the process.
  }
}

void stall_if_asked(caf::actor_system& sys) {
  if (!failpoint_hit("shutdown.stall"))
    return;
  // (An argument: CAF 0.17 trips UBSan on argument-less function actors.)
  auto a = sys.spawn<caf::detached>(
    [](caf::event_based_actor* self, int) { self->quit(); }, 0);
  census_add(a, "failpoint shutdown.stall");
  // Never released: the actor's object outlives its work.
  static_cast<void>(new caf::actor(std::move(a)));
  spdlog::warn("failpoint shutdown.stall: an actor is kept from being "
               "destroyed; the shutdown cannot finish");
}

} // namespace af
