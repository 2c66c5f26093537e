// Connecting to nodes (runtime/job/node.hpp) through CAF's middleman: what
// remote_actor does, with a time limit. Declared in
// runtime/job/detail/node_connect.hpp.
#include "actorflow/runtime/job/detail/node_connect.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/sec.hpp>

#include <spdlog/spdlog.h>

namespace af {

caf::io::middleman_actor node_middleman(caf::actor_system& sys) {
  return sys.has_openssl_manager() ? sys.openssl_manager().actor_handle()
                                   : sys.middleman().actor_handle();
}

node_spawner_actor connect_node(caf::scoped_actor& self,
                                const std::string& host,
                                const std::string& address,
                                std::chrono::milliseconds timeout) {
  auto& sys = self->system();
  auto where = "host '" + host + "' (" + address + ")";
  auto parsed = parse_address(address);
  if (!parsed)
    throw std::runtime_error(where + ": not a HOST:PORT address");
  if (!sys.has_middleman())
    throw std::runtime_error(where + ": this actor system has no network "
                                     "(load caf::io::middleman)");
  bool tls = sys.has_openssl_manager();
  node_spawner_actor spawner;
  caf::error failure;
  // A handshake that CAF gave up on (middleman.connection-timeout) is
  // tried again while the connect timeout lasts: a node's only I/O
  // thread can be busy for seconds after garbage on its port (CAF 0.17
  // zero-fills a receive buffer of whatever size a garbage header
  // claims, up to 4 GiB), and a later try then gets through.
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int attempt = 1;; ++attempt) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    failure = caf::error{};
    request_node(self, *parsed, std::max(left, std::chrono::milliseconds{1}))
      .receive(
        [&](caf::node_id&, caf::strong_actor_ptr& ptr,
            std::set<std::string>&) {
          if (ptr)
            spawner = caf::actor_cast<node_spawner_actor>(std::move(ptr));
          else
            failure = caf::sec::no_actor_published_at_port;
        },
        [&](caf::error& err) { failure = std::move(err); });
    if (failure != caf::sec::connection_timeout
        || std::chrono::steady_clock::now() + std::chrono::milliseconds{100}
             >= deadline)
      break;
    spdlog::warn("{}: no CAF handshake on attempt {} ({}); trying again "
                 "({} ms of the connect timeout left)",
                 where, attempt, sys.render(failure),
                 std::chrono::duration_cast<std::chrono::milliseconds>(
                   deadline - std::chrono::steady_clock::now())
                   .count());
  }
  if (!failure)
    return spawner;
  auto why = sys.render(failure);
  // No TCP connection at all: CAF names the failed ip_connect.
  bool no_tcp = failure == caf::sec::cannot_connect_to_node
                && !failure.context().empty();
  // A peer that accepts and then says nothing: CAF's own handshake
  // timeout (middleman.connection-timeout), else ours.
  if (failure == caf::sec::request_timeout
      || failure == caf::sec::connection_timeout)
    throw std::runtime_error(
      where + " accepted the connection but did not complete the "
      + (tls ? "TLS" : "CAF") + " handshake: "
      + (failure == caf::sec::request_timeout
           ? "no answer within " + std::to_string(timeout.count()) + " ms"
           : why)
      + " (is it a running `actorflow node`"
      + (tls ? " with --tls-cert/--tls-key/--tls-ca?)" : "?)"));
  if (tls && !no_tcp)
    throw std::runtime_error(
      where + " refused the TLS connection: " + why
      + " (the node must run with --tls-cert/--tls-key/--tls-ca, and "
        "each side's certificate must be signed by a CA in the other "
        "side's --tls-ca and not expired)");
  if (!tls && failure == caf::sec::disconnect_during_handshake)
    throw std::runtime_error(
      where + " closed the connection during the handshake: " + why
      + " (does the node require TLS? then run with "
        "--tls-cert/--tls-key/--tls-ca too)");
  throw std::runtime_error(where + " is unreachable: " + why
                           + " (is `actorflow node --listen " + address
                           + "` running there?)");
}

} // namespace af
