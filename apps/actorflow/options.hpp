// What the `actorflow` commands share: exit codes, the signals that stop a
// job or a node, and the options that `run` and `node` both take.
#pragma once

#include <atomic>
#include <chrono>

#include <CLI/CLI.hpp>

#include "actorflow/runtime/net/system.hpp"
#include "actorflow/runtime/topology/topology.hpp"

namespace af::cli {

/// Exit codes: 0 success, 1 runtime failure, 2 usage or validation error,
/// 130 stopped by Ctrl-C (SIGINT) or SIGTERM.
inline constexpr int exit_ok = 0;
inline constexpr int exit_failure = 1;
inline constexpr int exit_usage = 2;
inline constexpr int exit_interrupted = 130;

/// SIGINT and SIGTERM received since install_signal_handlers().
extern std::atomic<int> signals_received;

/// Counts SIGINT and SIGTERM in signals_received instead of dying of them.
void install_signal_handlers();

/// Prints a topology's load errors to stderr, one `file:line: message` each.
void print_errors(const load_result& r);

/// --tls-cert/--tls-key/--tls-ca on `run` and `node`.
void add_tls_options(CLI::App* cmd, tls_options& tls);

/// Exit code for unusable TLS options (a message printed, with `usage`
/// when one of the three is missing), or -1 if they are fine (or not given).
int check_tls(const char* usage, const tls_options& tls);

/// --shutdown-timeout on `run` and `node`.
void add_shutdown_option(CLI::App* cmd, double& seconds);

/// --shutdown-timeout's seconds as the limit bound_shutdown takes.
std::chrono::milliseconds shutdown_limit(double seconds);

} // namespace af::cli
