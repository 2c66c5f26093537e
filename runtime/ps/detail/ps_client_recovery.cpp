// ps_client when a shard is lost: noticing it (its down message, the
// coordinator's ps_gone_atom, or silence), and finding its replacement
// through the coordinator (ps_locate_atom, runtime/protocol/ps.hpp).
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "actorflow/runtime/ps/detail/ps_client_impl.hpp"
#include "actorflow/runtime/ps/ps_client.hpp"

namespace af {

bool ps_client::impl::given_up(size_t s,
                               std::chrono::steady_clock::time_point deadline) {
  return take_downs(s) || gone[s]
         || std::chrono::steady_clock::now() >= deadline;
}

bool ps_client::impl::take_downs(size_t s) {
  for (bool more = true; more;)
    self->receive(
      [&](caf::down_msg& dm) {
        for (size_t k = 0; k < shards.size(); ++k)
          if (shards[k].address() == dm.source)
            down[k] = true;
        if (coordinator && coordinator.address() == dm.source)
          coordinator_down = true;
      },
      [&](ps_gone_atom, const std::string& label) {
        for (size_t k = 0; k < shards.size(); ++k)
          if (name_of(k) == label)
            gone[k] = true;
      },
      caf::after(std::chrono::seconds{0}) >> [&] { more = false; });
  return down[s];
}

// No down message does not mean alive: across hosts this process may reach
// the shard only through the coordinator's node, and CAF 0.17 does not tell
// us when that node loses the shard's. So the coordinator, which is
// connected to every node and hears of a lost one at once (or within the
// heartbeat timeout), is asked first; then the shard is sent a stats
// request, which a live shard answers at once even while it holds our
// request back (a staleness bound).
void ps_client::impl::check_down(size_t s) {
  auto who = worker == ps_observer ? std::string{"observer"}
                                   : "worker " + std::to_string(worker);
  if (take_downs(s); gone[s]) {
    // The coordinator said so: wait for its replacement. (A word about a
    // shard this worker replaced already finds the same one again.)
    gone[s] = false;
    bounced = false;
    spdlog::info("{}: the coordinator says {} is lost; waiting for its "
                 "replacement",
                 who, name_of(s));
    if (locate(s, locate_patience))
      return;
  }
  if (bounced) {
    // Its data connection broke (runtime/net/data_plane.hpp): often the first
    // sign of a lost node, before the coordinator's word.
    bounced = false;
    spdlog::info("{}: {} did not take a request (its connection is down); "
                 "asking the coordinator where it is",
                 who, name_of(s));
  }
  probe(s);
}

// Repeats every `patience` until the shard answers, is replaced, or
// `probe_patience` passed.
void ps_client::impl::probe(size_t s) {
  auto deadline = std::chrono::steady_clock::now() + probe_patience;
  for (;;) {
    if (take_downs(s)) {
      replace(s, "went down");
      return;
    }
    if (coordinator && locate(s, patience))
      return;
    caf::error failure;
    if (answers_stats(s, failure))
      return;
    if (failure == caf::sec::request_timeout
        && std::chrono::steady_clock::now() < deadline)
      continue;
    down[s] = true;
    replace(s, "does not answer (" + caf::to_string(failure)
                 + "): its node is lost or frozen");
    return;
  }
}

bool ps_client::impl::answers_stats(size_t s, caf::error& failure) {
  bool answered = false;
  self->request(shard(s), patience, ps_stats_atom::value)
    .receive([&](ps_shard_stats&) { answered = true; },
             [&](caf::error& err) { failure = std::move(err); });
  return answered;
}

// The answer waits while the coordinator restores the shard; an error (the
// job cannot go on without it) throws.
bool ps_client::impl::locate(size_t s, std::chrono::seconds timeout) {
  auto fresh = ask_coordinator(s, timeout);
  if (!fresh)
    return false; // busy restoring it: ask again later
  if (*fresh == shards[s])
    return false;
  rejoin(s, std::move(*fresh));
  return true;
}

std::optional<caf::actor>
ps_client::impl::ask_coordinator(size_t s, std::chrono::seconds timeout) {
  caf::actor fresh;
  caf::error failure;
  // In slices of `patience`, so that losing the coordinator too (this node
  // cut off) fails the call at once rather than after `timeout`.
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    failure = caf::error{};
    self
      ->request(coordinator, std::min<std::chrono::seconds>(timeout, patience),
                ps_locate_atom::value, name_of(s))
      .receive([&](caf::actor& a) { fresh = std::move(a); },
               [&](caf::error& err) { failure = std::move(err); });
    if (failure != caf::sec::request_timeout)
      break;
    take_downs(s);
    if (coordinator_down)
      throw std::runtime_error("parameter server " + name_of(s)
                               + " does not answer, and the job's "
                                 "coordinator is gone too");
    if (std::chrono::steady_clock::now() >= deadline)
      return std::nullopt;
  }
  if (failure)
    throw std::runtime_error("parameter server " + name_of(s)
                             + " is lost, and it was not restored: "
                             + sys.render(failure));
  return fresh;
}

void ps_client::impl::rejoin(size_t s, caf::actor fresh) {
  self->demonitor(shards[s]);
  shards[s] = std::move(fresh);
  down[s] = false;
  self->monitor(shards[s]);
  if (worker == ps_observer)
    return;
  caf::error failure;
  self
    ->request(shard(s), locate_patience, ps_register_atom::value, worker,
              clock)
    .receive([&](uint64_t version) { read_version[s] = version; },
             [&](caf::error& err) { failure = std::move(err); });
  if (failure)
    throw std::runtime_error("parameter server " + name_of(s)
                             + " (restored) refused worker "
                             + std::to_string(worker) + ": "
                             + sys.render(failure));
  spdlog::info("worker {} joined the restored {} at clock {}", worker,
               name_of(s), clock);
}

// Without a coordinator that fails the call; else the coordinator's answer
// replaces it (and this worker registers there with its clock). A
// coordinator that still has the same shard means this worker alone cannot
// reach it.
void ps_client::impl::replace(size_t s, const std::string& why) {
  if (!coordinator)
    throw std::runtime_error("parameter server " + name_of(s) + " " + why);
  spdlog::warn("parameter server {} {}; asking the coordinator for its "
               "replacement",
               name_of(s), why);
  if (!locate(s, locate_patience))
    throw std::runtime_error("parameter server " + name_of(s) + " " + why
                             + ", yet the coordinator still reaches it: "
                               "this worker lost its own connection");
}

} // namespace af
