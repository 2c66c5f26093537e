// What the `actorflow` commands share: exit codes, the signals that stop a
// job or a node, and the options that `run` and `node` both take. Declared
// in apps/actorflow/options.hpp.
#include "apps/actorflow/options.hpp"

#include <csignal>
#include <cstdio>
#include <stdexcept>

namespace af::cli {

std::atomic<int> signals_received{0};

namespace {

extern "C" void on_signal(int) {
  signals_received.fetch_add(1);
}

} // namespace

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

void print_errors(const load_result& r) {
  for (auto& e : r.errors)
    std::fprintf(stderr, "%s\n", e.to_string().c_str());
}

void add_tls_options(CLI::App* cmd, tls_options& tls) {
  cmd
    ->add_option("--tls-cert", tls.cert,
                 "PEM certificate this process shows its peers: with "
                 "--tls-key and --tls-ca, nodes and coordinators talk TLS "
                 "and accept only peers whose certificate the CA signed "
                 "(docs/multi-host.md)")
    ->type_name("FILE");
  cmd
    ->add_option("--tls-key", tls.key,
                 "Unencrypted PEM private key of --tls-cert")
    ->type_name("FILE");
  cmd
    ->add_option("--tls-ca", tls.ca,
                 "PEM file with the cluster's CA certificate(s)")
    ->type_name("FILE");
}

int check_tls(const char* usage, const tls_options& tls) {
  try {
    check(tls);
  } catch (const std::invalid_argument& ex) {
    std::fprintf(stderr, "actorflow: %s\n", ex.what());
    if (tls.cert.empty() || tls.key.empty() || tls.ca.empty())
      std::fprintf(stderr, "usage: %s\n", usage);
    return exit_usage;
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "actorflow: %s\n", ex.what());
    return exit_failure;
  }
  return -1;
}

void add_shutdown_option(CLI::App* cmd, double& seconds) {
  cmd
    ->add_option("--shutdown-timeout", seconds,
                 "Seconds the process may take to stop once its work has "
                 "ended (after the summary, after a failure, or after "
                 "SIGINT/SIGTERM on a node); past them it names the actors "
                 "still there and exits with the exit code it would have "
                 "had. A signal during the shutdown exits at once")
    ->check(CLI::Range(0.1, 3600.0))
    ->type_name("SECONDS")
    ->capture_default_str();
}

std::chrono::milliseconds shutdown_limit(double seconds) {
  return std::chrono::milliseconds{static_cast<int64_t>(seconds * 1000)};
}

} // namespace af::cli
