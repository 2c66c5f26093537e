// `actorflow node`: serves the stages and shards that jobs place on this
// host, until SIGINT or SIGTERM. Declared in apps/actorflow/cmd_node.hpp.
#include "apps/actorflow/cmd_node.hpp"

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/exit_reason.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/publish.hpp>
#include <caf/scheduler/abstract_coordinator.hpp>
#include <caf/send.hpp>
#include <spdlog/spdlog.h>

#include "actorflow/runtime/job/node.hpp"
#include "actorflow/runtime/job/shutdown.hpp"
#include "actorflow/runtime/net/data_plane.hpp"
#include "actorflow/runtime/net/system.hpp"
#include "apps/actorflow/options.hpp"
#include "apps/actorflow/progress.hpp"

namespace af::cli {

namespace {

// The usage line check_tls prints when one of the TLS options is missing.
constexpr const char* node_usage =
  "actorflow node [--listen ADDR] [--tls-cert FILE "
  "--tls-key FILE --tls-ca FILE]";

struct node_args {
  std::string listen = "127.0.0.1:4242";
  int threads = -1;
  tls_options tls;
  double shutdown_timeout_s = 5;
  int data_port = 0;
  std::string data_socket = "auto";
  size_t data_shm_mib = 64;
};

int cmd_node(const node_args& args, const registry& reg) {
  if (auto rc = check_tls(node_usage, args.tls); rc >= 0)
    return rc;
  auto text = args.listen;
  if (text.find(':') == std::string::npos)
    text = "127.0.0.1:" + text; // a bare port binds to loopback
  auto addr = parse_address(text);
  if (!addr) {
    std::fprintf(stderr, "node: --listen must be PORT or HOST:PORT, got '%s'\n",
                 args.listen.c_str());
    return exit_usage;
  }
  engine_options opts;
  if (args.threads >= 0)
    opts.threads = static_cast<size_t>(args.threads);
  caf::actor_system_config cfg;
  add_message_types(cfg);
  apply(opts, cfg);
  enable_network(cfg, args.tls);
  caf::actor_system sys{cfg};
  auto spawner = spawn_node_spawner(sys, reg);
  // With TLS, only through the OpenSSL module: a peer must complete a TLS
  // handshake with a certificate signed by the CA before anything else.
  auto port =
    args.tls.enabled()
      ? caf::openssl::publish(spawner, addr->port, addr->host.c_str(), true)
      : sys.middleman().publish(spawner, addr->port, addr->host.c_str(), true);
  if (!port) {
    std::fprintf(stderr, "node: cannot listen on %s: %s\n", text.c_str(),
                 sys.render(port.error()).c_str());
    caf::anon_send_exit(spawner, caf::exit_reason::user_shutdown);
    bound_shutdown(exit_failure, shutdown_limit(args.shutdown_timeout_s),
                   signals_received);
    return exit_failure;
  }
  // The line tests and scripts wait for (with the port, when 0 was asked).
  std::printf("actorflow node listening on %s:%u\n", addr->host.c_str(),
              static_cast<unsigned>(*port));
  std::fflush(stdout);
  spdlog::info("node: listening on {}:{} ({} scheduler threads)", addr->host,
               *port, sys.scheduler().num_workers());
  if (args.tls.enabled())
    spdlog::info("node: TLS with certificate {}; peers need a certificate "
                 "signed by a CA in {}",
                 args.tls.cert, args.tls.ca);
  // The data plane (runtime/net/data_plane.hpp), where the node binds; TLS
  // with the same files when the node has them.
  try {
    data_plane::options dp;
    dp.listen_host = addr->host;
    dp.port = static_cast<uint16_t>(args.data_port);
    dp.local_sockets = args.data_socket == "auto";
    dp.shared_memory = args.data_shm_mib << 20;
    auto plane = data_plane::start(sys, dp);
    spdlog::info("node: data port {}:{}{}", addr->host, plane->port(),
                 args.tls.enabled() ? " (TLS)" : "");
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "node: %s\n", ex.what());
    caf::anon_send_exit(spawner, caf::exit_reason::user_shutdown);
    bound_shutdown(exit_failure, shutdown_limit(args.shutdown_timeout_s),
                   signals_received);
    return exit_failure;
  }
  install_signal_handlers();
  while (signals_received.load() == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds{100});
  spdlog::info("node: stopping");
  caf::anon_send_exit(spawner, caf::exit_reason::user_shutdown);
  bound_shutdown(exit_ok, shutdown_limit(args.shutdown_timeout_s),
                 signals_received);
  await_exits(shutdown_limit(args.shutdown_timeout_s));
  // What the data port saw over the node's life, refusals included (each
  // was logged when it happened, with the peer's address and the cause).
  if (auto plane = data_plane::of(sys)) {
    auto s = plane->stats();
    spdlog::info("node: data plane: {} connections accepted, {} dialed ({} "
                 "over a Unix socket), {} refused (hello or TLS), {} broken "
                 "(bad frames), {} frames in, {} out; {} sent through "
                 "shared memory, {} messages through a socket for want of "
                 "room there",
                 s.accepted, s.dialed, s.local, s.refused, s.broken,
                 s.frames_received, s.frames_sent,
                 human_bytes(static_cast<double>(s.bytes_shared)),
                 s.region_full);
  }
  data_plane::stop(sys);
  stall_if_asked(sys);
  return exit_ok;
}

} // namespace

void add_node(CLI::App& app, const registry& reg,
              std::function<int()>& action) {
  auto args = std::make_shared<node_args>();
  auto* node = app.add_subcommand(
    "node", "Serve jobs: run the stages and parameter-server shards that "
            "topologies place on this host");
  node
    ->add_option("--listen", args->listen,
                 "PORT or HOST:PORT to listen on (a bare port, and the "
                 "default, bind to 127.0.0.1 only; port 0 picks a free one)")
    ->capture_default_str();
  node
    ->add_option("--threads", args->threads,
                 "Scheduler worker threads (default: the usable cores)")
    ->check(CLI::NonNegativeNumber);
  node
    ->add_option("--data-port", args->data_port,
                 "Port of the data plane, where stages and shards on other "
                 "nodes send tensors straight to this node; it binds where "
                 "--listen binds (0: a free port); TLS with --tls-*")
    ->check(CLI::Range(0, 65535))
    ->capture_default_str();
  node
    ->add_option("--data-socket", args->data_socket,
                 "auto: processes in this node's network namespace on this "
                 "machine reach its data plane on a Unix socket, faster "
                 "than loopback TCP; tcp: only on the data port")
    ->check(CLI::IsMember({"auto", "tcp"}))
    ->capture_default_str();
  node
    ->add_option("--data-shm", args->data_shm_mib,
                 "MiB of memory this node shares with each peer process on "
                 "its Unix socket, per direction, for tensors: copied once "
                 "into it and read in place, not copied twice through the "
                 "socket (0: through the socket; not with --tls-*)")
    ->check(CLI::Range(0, 65536))
    ->capture_default_str();
  add_tls_options(node, args->tls);
  add_shutdown_option(node, args->shutdown_timeout_s);
  node->callback([args, &reg, &action] {
    action = [args, &reg] {
      return cmd_node(*args, reg);
    };
  });
}

} // namespace af::cli
