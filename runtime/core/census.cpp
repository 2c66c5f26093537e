// The process's roll of the engine's actors (stage replicas,
// parameter-server shards, coordinators, writers), by label, for as long as
// each actor object exists. Declared in runtime/core/census.hpp.
#include "actorflow/runtime/core/census.hpp"

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>

#include <caf/actor_cast.hpp>
#include <caf/actor_control_block.hpp>
#include <caf/error.hpp>
#include <caf/weak_intrusive_ptr.hpp>

namespace af {
namespace {

struct exit_note {
  std::mutex mtx;
  bool exited = false;
  std::string reason;
};

struct entry {
  caf::weak_actor_ptr addr;
  std::string label;
  std::shared_ptr<exit_note> note;
};

struct roll {
  std::mutex mtx;
  std::vector<entry> entries;
  // Notified whenever a recorded actor has exited.
  std::mutex exits_mtx;
  std::condition_variable exits;
};

roll& the_roll() {
  // Never destroyed: actors may be destroyed (and the roll read) while
  // static destructors run.
  static auto* r = new roll;
  return *r;
}

// The object exists while a strong reference does (the weak one keeps only
// the control block).
bool object_exists(const caf::weak_actor_ptr& p) {
  auto* ctrl = caf::actor_cast<caf::actor_control_block*>(p);
  return ctrl != nullptr && ctrl->strong_refs.load() > 0;
}

} // namespace

void census_add(const caf::actor& a, std::string label) {
  if (!a)
    return;
  auto note = std::make_shared<exit_note>();
  auto& r = the_roll();
  {
    std::lock_guard<std::mutex> guard{r.mtx};
    // Forget actors that are gone, so a long-lived node's roll stays small.
    r.entries.erase(std::remove_if(r.entries.begin(), r.entries.end(),
                                   [](const entry& e) {
                                     return !object_exists(e.addr);
                                   }),
                    r.entries.end());
    r.entries.push_back(
      {caf::actor_cast<caf::weak_actor_ptr>(a), std::move(label), note});
  }
  // Runs at once if `a` has already exited; else after the exit functions
  // attached later (CAF runs the newest first), monitors' down messages
  // among them.
  a->attach_functor([note, &r](const caf::error& reason) {
    {
      std::lock_guard<std::mutex> guard{note->mtx};
      note->exited = true;
      note->reason = caf::to_string(reason);
    }
    std::lock_guard<std::mutex> guard{r.exits_mtx};
    r.exits.notify_all();
  });
}

std::vector<std::string> census_alive() {
  std::vector<std::string> out;
  auto& r = the_roll();
  std::lock_guard<std::mutex> guard{r.mtx};
  for (auto& e : r.entries) {
    if (!object_exists(e.addr))
      continue;
    auto* ctrl = caf::actor_cast<caf::actor_control_block*>(e.addr);
    auto line = e.label + " (actor " + std::to_string(ctrl->id()) + "): ";
    std::lock_guard<std::mutex> note_guard{e.note->mtx};
    if (e.note->exited)
      line += "exited (" + e.note->reason + "), still referenced";
    else
      line += "running";
    out.push_back(std::move(line));
  }
  return out;
}

std::vector<std::string>
census_await_exits(std::chrono::steady_clock::time_point deadline) {
  auto& r = the_roll();
  auto pending = [&r] {
    std::vector<std::string> out;
    std::lock_guard<std::mutex> guard{r.mtx};
    for (auto& e : r.entries) {
      if (!object_exists(e.addr))
        continue;
      std::lock_guard<std::mutex> note_guard{e.note->mtx};
      if (!e.note->exited)
        out.push_back(e.label);
    }
    return out;
  };
  std::unique_lock<std::mutex> guard{r.exits_mtx};
  for (;;) {
    guard.unlock();
    auto left = pending();
    guard.lock();
    if (left.empty() || std::chrono::steady_clock::now() >= deadline)
      return left;
    // Also wakes now and then: an actor whose object goes away without
    // exiting (never spawned) does not notify.
    r.exits.wait_until(guard, std::min(deadline,
                                       std::chrono::steady_clock::now()
                                         + std::chrono::milliseconds{50}));
  }
}

} // namespace af
