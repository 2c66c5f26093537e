// The process's roll of the engine's actors (stage replicas, parameter-
// server shards, coordinators, writers), by label, for as long as each
// actor object exists. CAF 0.17's ~actor_system() waits for every detached
// actor's object to be destroyed; one whose last strong reference is never
// released hangs the process after its work is done. The roll lets a
// shutdown that overruns its time say which actors are still there, and
// whether they had already exited (then something still holds them).
#pragma once

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

} // namespace af
