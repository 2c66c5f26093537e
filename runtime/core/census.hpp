// The process's roll of the engine's actors (stage replicas, parameter-
// server shards, coordinators, writers), by label, for as long as each
// actor object exists. CAF 0.17's ~actor_system() waits for every detached
// actor's object to be destroyed; one whose last strong reference is never
// released hangs the process after its work is done. The roll lets a
// shutdown that overruns its time say which actors are still there, and
// whether they had already exited (then something still holds them).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <caf/actor.hpp>

namespace af {

/// Adds `a` under `label` ("train[1]", "ps[0]", "coordinator"). The entry
/// goes when the actor object is destroyed (checked lazily: the roll holds
/// only a weak reference). Thread-safe; does not throw except std::bad_alloc.
void census_add(const caf::actor& a, std::string label);

/// One line per recorded actor whose object still exists:
/// "train[1] (actor 42): running" or
/// "ps[0] (actor 17): exited (error ...), still referenced". Thread-safe;
/// safe to call while the actor system shuts down. Does not throw except
/// std::bad_alloc.
std::vector<std::string> census_alive();

/// Waits until every recorded actor whose object still exists has exited,
/// or until `deadline`; returns the labels of those that have not. An
/// actor counts as exited once its exit functions ran, which sends its
/// down messages: call this before the actor system is destroyed, so that
/// they reach their receivers while the system still runs. (CAF 0.17's
/// middleman does not drain its BASP broker's mailbox once it stopped: a
/// down message that an exiting actor sends it then, because a remote
/// node monitors that actor, stays there, and with it the last reference
/// to the actor; for a detached actor ~actor_system() then waits for
/// good.) Thread-safe; does not throw except std::bad_alloc.
std::vector<std::string>
census_await_exits(std::chrono::steady_clock::time_point deadline);

} // namespace af
