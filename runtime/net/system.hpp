// Setting up a caf::actor_system for the engine: its message types and the
// few CAF options the engine controls (worker threads, scheduler policy).
// CAF's own config parsing ignores unknown keys, so the engine parses its
// options itself (CLI11 in apps/, the topology's `runtime` block) and sets
// CAF's explicitly here.
#pragma once

#include <cstddef>
#include <string>

#include <caf/actor_system_config.hpp>

#include "actorflow/proto/topology.pb.h"

namespace af {

struct engine_options {
  /// Scheduler worker threads; 0 = number of cores.
  size_t threads = 0;
  /// "sharing" (default: measured faster for stage chains on 2 cores, see
  /// docs/benchmarks.md) or "stealing".
  std::string scheduler = "sharing";
};

/// Registers every message type the runtime sends, under stable names, so
/// that they can cross hosts. Call once per actor_system_config, before the
/// actor_system is made from it. Does not throw.
void add_message_types(caf::actor_system_config& cfg);

/// Applies `opts` to `cfg` (scheduler.max-threads, scheduler.policy).
/// Throws std::invalid_argument on an unknown scheduler policy.
void apply(const engine_options& opts, caf::actor_system_config& cfg);

/// TLS between `actorflow node` processes and coordinators, through CAF's
/// OpenSSL module (libcaf_openssl): each side presents `cert` (PEM, with its
/// unencrypted PEM private key `key`) and accepts a peer only if the peer's
/// certificate is signed by a CA in `ca` (PEM). Host names are not checked:
/// any certificate the CA signed is a member of the cluster. All three or
/// none.
struct tls_options {
  std::string cert;
  std::string key;
  std::string ca;

  /// Any of the three is set (check() then insists on all three).
  bool enabled() const noexcept {
    return !cert.empty() || !key.empty() || !ca.empty();
  }
};

/// Checks `tls` before anything listens or connects (CAF reads the files
/// only when a connection opens, and fails there without saying why).
/// Throws std::invalid_argument with one line naming the option and file:
/// only some of the three set, a file missing or unreadable, not PEM, an
/// encrypted key, a key that does not belong to the certificate, or a
/// certificate the CA did not sign. std::runtime_error when OpenSSL itself
/// fails (no memory for a context). Does nothing when !tls.enabled().
void check(const tls_options& tls);

/// Loads CAF's middleman (remote actors over TCP) with heartbeats, so that
/// a frozen peer is noticed within seconds. With `tls` enabled, also loads
/// CAF's OpenSSL module with those files: publish with
/// caf::openssl::publish then; job::start connects through it whenever the
/// system has it (sys.has_openssl_manager()). Call it before the
/// actor_system is made from `cfg`. Does not throw: call check(tls) first,
/// or bad files show only when a connection opens. Reads the three files
/// once, here, and hands CAF copies held in memory for the rest of the
/// process (CAF loads them for every connection, and aborts the process
/// on one it cannot load): files changed later take effect at the next
/// start.
void enable_network(caf::actor_system_config& cfg, const tls_options& tls = {});

/// The engine options a topology's `runtime` block asks for. Does not
/// validate them (apply() throws on an unknown scheduler).
engine_options engine_options_of(const topology::Runtime& rt);

} // namespace af
