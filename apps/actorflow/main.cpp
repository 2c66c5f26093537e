// actorflow: run and check ActorFlow topologies.
//
// Exit codes: 0 success, 1 runtime failure, 2 usage or validation error,
// 130 stopped by Ctrl-C (SIGINT) or SIGTERM.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/exit_reason.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/publish.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/scheduler/abstract_coordinator.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "actors/builtin.hpp"
#include "actors/metrics.hpp"
#include "apps/actorflow/convert.hpp"
#include "apps/actorflow/inspect.hpp"
#include "apps/actorflow/metrics_endpoint.hpp"
#include "apps/actorflow/progress.hpp"
#include "apps/actorflow/report.hpp"
#include "apps/actorflow/shutdown.hpp"
#include "runtime/autotune.hpp"
#include "runtime/job.hpp"
#include "runtime/node.hpp"
#include "runtime/system.hpp"
#include "runtime/topology.hpp"
#include "runtime/version.hpp"

namespace {

constexpr int exit_ok = 0;
constexpr int exit_failure = 1;
constexpr int exit_usage = 2;
constexpr int exit_interrupted = 130;

std::atomic<int> signals_received{0};

extern "C" void on_signal(int) {
  signals_received.fetch_add(1);
}

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

void print_errors(const af::load_result& r) {
  for (auto& e : r.errors)
    std::fprintf(stderr, "%s\n", e.to_string().c_str());
}

struct run_args {
  std::string topology;
  int64_t threads = -1;
  std::string scheduler;
  int log_every_s = 5;
  bool no_progress = false;
  bool resume = false;
  std::string logdir;
  std::string report_json;
  int metrics_port = -1; // unset
  af::tls_options tls;
  double shutdown_timeout_s = 5;
  double connect_timeout_s = 10;
};

// --tls-cert/--tls-key/--tls-ca on `run` and `node`.
void add_tls_options(CLI::App* cmd, af::tls_options& tls) {
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

// Exit code for unusable TLS options (a message printed), or -1 if they are
// fine (or not given).
int check_tls(const char* usage, const af::tls_options& tls) {
  try {
    af::check(tls);
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

std::chrono::milliseconds shutdown_limit(double seconds) {
  return std::chrono::milliseconds{static_cast<int64_t>(seconds * 1000)};
}

// --shutdown-timeout on `run` and `node`.
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

int cmd_validate(const std::string& path, bool list_types,
                 const af::registry& reg) {
  if (list_types) {
    for (auto* t : reg.list())
      std::printf("%-18s %-9s %s\n", t->name.c_str(), af::to_string(t->kind),
                  t->description.c_str());
    if (path.empty())
      return exit_ok;
  }
  if (path.empty()) {
    std::fprintf(stderr, "validate: a topology file is required (or use "
                         "--list-types)\n");
    return exit_usage;
  }
  auto loaded = af::load_topology_file(path, reg);
  if (!loaded.ok()) {
    print_errors(loaded);
    return exit_usage;
  }
  auto& spec = loaded.topology->spec;
  int64_t actors = 0;
  for (auto& s : spec.stage())
    actors += af::replicas_of(s);
  std::printf("%s: ok (%d stages, %lld stage replicas)\n", path.c_str(),
              spec.stage_size(), static_cast<long long>(actors));
  return exit_ok;
}

int run_job(caf::actor_system& sys, const run_args& args,
            const af::loaded_topology& topo, const af::engine_options& opts,
            const af::registry& reg);

int cmd_run(const run_args& args, const af::registry& reg) {
  if (auto rc = check_tls("actorflow run TOPOLOGY [--tls-cert FILE --tls-key "
                          "FILE --tls-ca FILE] ...",
                          args.tls);
      rc >= 0)
    return rc;
  auto loaded = af::load_topology_file(args.topology, reg);
  if (!loaded.ok()) {
    print_errors(loaded);
    return exit_usage;
  }
  auto& topo = *loaded.topology;
  auto opts = af::engine_options_of(topo.spec.runtime());
  if (args.threads >= 0)
    opts.threads = static_cast<size_t>(args.threads);
  if (!args.scheduler.empty())
    opts.scheduler = args.scheduler;
  caf::actor_system_config cfg;
  af::add_message_types(cfg);
  af::apply(opts, cfg);
  // Stages placed on nodes: connect through CAF's middleman (TLS: through
  // its OpenSSL module).
  if (topo.spec.host_size() > 0)
    af::enable_network(cfg, args.tls);
  else if (args.tls.enabled())
    spdlog::warn("--tls-cert/--tls-key/--tls-ca: the topology places nothing "
                 "on nodes, so nothing connects");
  caf::actor_system sys{cfg};
  auto rc = run_job(sys, args, topo, opts, reg);
  // Failures before the summary: their shutdown is bounded from here.
  af::cli::bound_shutdown(rc, shutdown_limit(args.shutdown_timeout_s),
                          signals_received);
  af::cli::await_exits(shutdown_limit(args.shutdown_timeout_s));
  return rc;
}

// The job of cmd_run in `sys`, to its summary; returns the exit code.
// Bounds the shutdown (af::cli::bound_shutdown) once the summary is out.
int run_job(caf::actor_system& sys, const run_args& args,
            const af::loaded_topology& topo, const af::engine_options& opts,
            const af::registry& reg) {
  auto name = topo.spec.name().empty() ? args.topology : topo.spec.name();
  int64_t actors = 0;
  for (auto& s : topo.spec.stage())
    actors += af::replicas_of(s);
  spdlog::info("job '{}': {} stages, {} stage replicas, {} scheduler "
               "threads ({})",
               name, topo.spec.stage_size(), actors,
               sys.scheduler().num_workers(), opts.scheduler);

  std::vector<std::string> decisions;
  std::optional<af::loaded_topology> tuned;
  if (topo.spec.runtime().autotune()) {
    auto budget = af::autotune_budget_of(topo.spec.runtime());
    spdlog::info("autotune: measuring the pipeline for {:.1f} s ({} cores, "
                 "{} MiB of RAM budget)",
                 budget.seconds, budget.cpus, budget.ram_bytes >> 20);
    try {
      auto r = af::autotune(sys, topo, reg, budget);
      decisions = std::move(r.decisions);
      tuned = std::move(r.tuned);
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "actorflow: %s\n", ex.what());
      return exit_failure;
    }
    for (auto& d : decisions)
      spdlog::info("{}", d);
  }
  const auto& to_run = tuned ? *tuned : topo;

  af::cli::progress_display display{isatty(STDERR_FILENO) == 1,
                                    std::chrono::seconds{args.log_every_s},
                                    &to_run.spec};
  af::job_options jopts;
  // Stages report every 0.5 s; refreshing the line once a second shows
  // counts that are at most half a second old.
  jopts.progress_interval = std::chrono::seconds{1};
  jopts.resume = args.resume;
  jopts.connect_timeout = std::chrono::milliseconds{
    static_cast<int64_t>(args.connect_timeout_s * 1000)};
  // TensorBoard events (--logdir): a metrics actor gets the scalars of
  // every progress report. It exists once the job started (its resumed
  // step is known then); reports before that are dropped.
  auto events = std::make_shared<std::atomic<caf::actor*>>(nullptr);
  caf::actor events_actor;
  auto scalars = std::make_shared<af::progress_scalars>();
  // Prometheus (--metrics-port): the same numbers, scraped over HTTP.
  std::shared_ptr<af::cli::metrics_endpoint> endpoint;
  if (args.metrics_port >= 0) {
    try {
      endpoint = std::make_shared<af::cli::metrics_endpoint>(
        static_cast<uint16_t>(args.metrics_port));
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "actorflow: %s\n", ex.what());
      return exit_usage;
    }
    spdlog::info("Prometheus metrics: http://127.0.0.1:{}/metrics",
                 endpoint->port());
  }
  bool show = !args.no_progress;
  if (show || !args.logdir.empty() || endpoint)
    jopts.on_progress = [&display, show, events, scalars,
                         endpoint](const af::job_progress& p) {
      if (show)
        display.update(p);
      auto* a = events->load();
      if (a == nullptr && !endpoint)
        return;
      int64_t step = 0;
      auto values = scalars->next(p, step);
      if (endpoint)
        endpoint->update(step, values);
      if (a != nullptr) {
        // Evaluations at the steps they evaluated; the rest at this step.
        auto events = scalars->events(p, values);
        if (!events.empty())
          caf::anon_send(*a, af::metrics_atom::value, std::move(events));
        caf::anon_send(*a, af::metrics_atom::value, step, std::move(values),
                       p.histograms, false);
      }
    };
  install_signal_handlers();
  std::optional<af::job> job;
  try {
    job = af::job::start(sys, to_run, reg, jopts);
    if (!args.logdir.empty()) {
      // One run directory per job: the topology's name (or file name).
      auto run_dir = (std::filesystem::path{args.logdir}
                      / (topo.spec.name().empty()
                           ? std::filesystem::path{args.topology}.stem()
                           : std::filesystem::path{topo.spec.name()}))
                       .string();
      if (auto resumed = job->resumed_step())
        *scalars = af::progress_scalars{static_cast<int64_t>(*resumed)};
      events_actor = af::spawn_event_writer(sys, run_dir, job->resumed_step());
      events->store(&events_actor);
    }
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "actorflow: %s\n", ex.what());
    if (job)
      job->abort(ex.what());
    return exit_failure;
  }
  bool stop_sent = false;
  bool abort_sent = false;
  int signals_at_stop = 0;
  auto stop_time = std::chrono::steady_clock::now();
  std::optional<af::run_result> result;
  while (!(result = job->wait_for(std::chrono::milliseconds{100}))) {
    if (abort_sent) {
      // The abort killed every stage, and the coordinator reports that at
      // once; a process that still waits here has lost that report.
      af::cli::bound_shutdown(exit_interrupted,
                              shutdown_limit(args.shutdown_timeout_s),
                              signals_received);
      continue;
    }
    auto n = signals_received.load();
    if (n >= 1 && !stop_sent) {
      stop_sent = true;
      signals_at_stop = n;
      stop_time = std::chrono::steady_clock::now();
      display.finish();
      spdlog::warn("interrupted: {} (press Ctrl-C again to abort)",
                   to_run.spec.has_checkpoint()
                     ? "taking a checkpoint, then stopping"
                     : "draining the pipeline");
      job->stop();
      continue;
    }
    if (!stop_sent || abort_sent)
      continue;
    // One Ctrl-C can arrive twice (the terminal's process group and a
    // supervisor such as timeout(1) both signal us): only a signal that
    // comes well after the first one aborts.
    if (std::chrono::steady_clock::now() - stop_time
        < std::chrono::milliseconds{500}) {
      signals_at_stop = n;
    } else if (n > signals_at_stop) {
      abort_sent = true;
      job->abort("aborted by a second interrupt");
    }
  }
  display.finish();
  if (events_actor) {
    // The final numbers, then wait (a few seconds at most) for the actor
    // to have written them.
    events->store(nullptr); // (the coordinator has quit: no more reports)
    int64_t step = 0;
    auto values = scalars->next(result->final, step);
    auto step_events = scalars->events(result->final, values);
    caf::scoped_actor self{sys};
    self->monitor(events_actor);
    if (!step_events.empty())
      self->send(events_actor, af::metrics_atom::value,
                 std::move(step_events));
    self->send(events_actor, af::metrics_atom::value, step, std::move(values),
               result->final.histograms, true);
    self->receive([](caf::down_msg&) {},
                  caf::after(std::chrono::seconds{5}) >> [] {
                    spdlog::warn("TensorBoard events: the writer did not "
                                 "finish within 5 s");
                  });
  }
  af::cli::print_summary(stdout, name, *result);
  if (!args.report_json.empty()) {
    if (auto* f = std::fopen(args.report_json.c_str(), "w")) {
      af::cli::write_report_json(f, name, *result);
      if (std::fclose(f) != 0)
        spdlog::error("--report-json {}: cannot write it", args.report_json);
    } else {
      spdlog::error("--report-json {}: cannot create it", args.report_json);
    }
  }
  for (auto& d : decisions)
    std::printf("  %s\n", d.c_str());
  std::fflush(stdout);
  if (!result->ok)
    std::fprintf(stderr, "actorflow: %s\n", result->error.c_str());
  auto rc = stop_sent ? exit_interrupted
                      : (result->ok ? exit_ok : exit_failure);
  // From here on (the job's actors stopping, ~actor_system), the process
  // exits within the bound whatever holds it.
  af::cli::bound_shutdown(rc, shutdown_limit(args.shutdown_timeout_s),
                          signals_received);
  af::cli::stall_if_asked(sys);
  return rc;
}

struct node_args {
  std::string listen = "127.0.0.1:4242";
  int threads = -1;
  af::tls_options tls;
  double shutdown_timeout_s = 5;
};

// `actorflow node`: serves jobs until SIGINT or SIGTERM.
int cmd_node(const node_args& args, const af::registry& reg) {
  if (auto rc = check_tls("actorflow node [--listen ADDR] [--tls-cert FILE "
                          "--tls-key FILE --tls-ca FILE]",
                          args.tls);
      rc >= 0)
    return rc;
  auto text = args.listen;
  if (text.find(':') == std::string::npos)
    text = "127.0.0.1:" + text; // a bare port binds to loopback
  auto addr = af::parse_address(text);
  if (!addr) {
    std::fprintf(stderr, "node: --listen must be PORT or HOST:PORT, got '%s'\n",
                 args.listen.c_str());
    return exit_usage;
  }
  af::engine_options opts;
  if (args.threads >= 0)
    opts.threads = static_cast<size_t>(args.threads);
  caf::actor_system_config cfg;
  af::add_message_types(cfg);
  af::apply(opts, cfg);
  af::enable_network(cfg, args.tls);
  caf::actor_system sys{cfg};
  auto spawner = af::spawn_node_spawner(sys, reg);
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
    af::cli::bound_shutdown(exit_failure,
                            shutdown_limit(args.shutdown_timeout_s),
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
  install_signal_handlers();
  while (signals_received.load() == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds{100});
  spdlog::info("node: stopping");
  caf::anon_send_exit(spawner, caf::exit_reason::user_shutdown);
  af::cli::bound_shutdown(exit_ok, shutdown_limit(args.shutdown_timeout_s),
                          signals_received);
  af::cli::await_exits(shutdown_limit(args.shutdown_timeout_s));
  af::cli::stall_if_asked(sys);
  return exit_ok;
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"ActorFlow: an actor-model dataflow engine for training "
               "machine-learning models.",
               "actorflow"};
  app.set_version_flag("--version", std::string{"actorflow "} + af::version);
  app.require_subcommand(1);
  // Global options may also follow the subcommand: `run x --log-level debug`.
  app.fallthrough();
  std::string log_level = "info";
  app
    .add_option("--log-level", log_level,
                "Log level: trace, debug, info, warn, error, off")
    ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
    ->capture_default_str();

  run_args rargs;
  auto* run = app.add_subcommand("run", "Run a topology to its end");
  run->add_option("topology", rargs.topology, "Topology file (.pbtxt)")
    ->required();
  run
    ->add_option("--threads", rargs.threads,
                 "Scheduler worker threads (default: the topology's "
                 "runtime.threads, else the number of cores)")
    ->check(CLI::NonNegativeNumber);
  run
    ->add_option("--scheduler", rargs.scheduler,
                 "CAF scheduler policy (default: the topology's, else "
                 "sharing)")
    ->check(CLI::IsMember({"stealing", "sharing"}));
  run
    ->add_option("--log-every", rargs.log_every_s,
                 "Seconds between progress log lines when stderr is not a "
                 "terminal")
    ->check(CLI::PositiveNumber)
    ->capture_default_str();
  run->add_flag("--no-progress", rargs.no_progress,
                "Print no progress while running");
  run->add_flag("--resume", rargs.resume,
                "Continue from the newest complete checkpoint in the "
                "topology's checkpoint.dir (start from the beginning when "
                "there is none yet); see docs/checkpoints.md");
  run->add_option("--logdir", rargs.logdir,
                  "Write TensorBoard event files into LOGDIR/<topology "
                  "name> (docs/monitoring.md); `tensorboard --logdir "
                  "LOGDIR` shows them");
  run
    ->add_option("--metrics-port", rargs.metrics_port,
                 "Serve the job's numbers (those --logdir writes) in "
                 "Prometheus text format at http://127.0.0.1:PORT/metrics "
                 "while it runs (0: a free port, logged)")
    ->check(CLI::Range(0, 65535))
    ->type_name("PORT");
  run->add_option("--report-json", rargs.report_json,
                  "Also write the final report (every stage's replicas, "
                  "items/s, busy and waiting shares, the bottleneck) as "
                  "JSON to FILE (docs/monitoring.md)");
  add_tls_options(run, rargs.tls);
  add_shutdown_option(run, rargs.shutdown_timeout_s);
  run
    ->add_option("--connect-timeout", rargs.connect_timeout_s,
                 "Seconds to connect to each node (TCP, TLS and CAF's "
                 "handshake, tried again while they last when a handshake "
                 "times out) before the job fails")
    ->check(CLI::Range(0.1, 3600.0))
    ->type_name("SECONDS")
    ->capture_default_str();

  std::string vpath;
  bool list_types = false;
  auto* validate = app.add_subcommand(
    "validate", "Check a topology file and report every problem as "
                "file:line: message");
  validate->add_option("topology", vpath, "Topology file (.pbtxt)");
  validate->add_flag("--list-types", list_types,
                     "List the registered stage types");

  node_args nargs;
  auto* node = app.add_subcommand(
    "node", "Serve jobs: run the stages and parameter-server shards that "
            "topologies place on this host");
  node
    ->add_option("--listen", nargs.listen,
                 "PORT or HOST:PORT to listen on (a bare port, and the "
                 "default, bind to 127.0.0.1 only; port 0 picks a free one)")
    ->capture_default_str();
  node
    ->add_option("--threads", nargs.threads,
                 "Scheduler worker threads (default: the number of cores)")
    ->check(CLI::NonNegativeNumber);
  add_tls_options(node, nargs.tls);
  add_shutdown_option(node, nargs.shutdown_timeout_s);

  std::function<int()> action;
  af::cli::add_convert(app, action);
  af::cli::add_inspect(app, action);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    auto rc = app.exit(e);
    return rc == 0 ? exit_ok : exit_usage;
  }

  auto logger = spdlog::stderr_color_mt("actorflow");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
  spdlog::set_level(spdlog::level::from_str(log_level));

  af::registry reg;
  af::register_builtin_stages(reg);
  try {
    if (action)
      return action();
    if (run->parsed())
      return cmd_run(rargs, reg);
    if (node->parsed())
      return cmd_node(nargs, reg);
    return cmd_validate(vpath, list_types, reg);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "actorflow: %s\n", ex.what());
    return exit_failure;
  }
}
