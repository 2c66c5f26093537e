// `actorflow run`: runs a topology's job to its end and prints its summary.
// Declared in apps/actorflow/cmd_run.hpp.
#include "apps/actorflow/cmd_run.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scheduler/abstract_coordinator.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <spdlog/spdlog.h>

#include "actorflow/actors/training/tensorboard_writer.hpp"
#include "actorflow/runtime/job/job.hpp"
#include "actorflow/runtime/job/shutdown.hpp"
#include "actorflow/runtime/job/supervisor.hpp"
#include "actorflow/runtime/net/data_plane.hpp"
#include "actorflow/runtime/net/system.hpp"
#include "actorflow/runtime/topology/topology.hpp"
#include "apps/actorflow/metrics_endpoint.hpp"
#include "apps/actorflow/options.hpp"
#include "apps/actorflow/progress.hpp"
#include "apps/actorflow/report.hpp"

namespace af::cli {

namespace {

// The usage line check_tls prints when one of the TLS options is missing.
constexpr const char* run_usage =
  "actorflow run TOPOLOGY [--tls-cert FILE "
  "--tls-key FILE --tls-ca FILE] ...";

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
  tls_options tls;
  double shutdown_timeout_s = 5;
  double connect_timeout_s = 10;
  int max_restarts = 10;
};

void log_job_start(caf::actor_system& sys, const std::string& name,
                   const loaded_topology& topo, const engine_options& opts) {
  int64_t actors = 0;
  for (auto& s : topo.spec.stage())
    actors += replicas_of(s);
  spdlog::info("job '{}': {} stages, {} stage replicas, {} scheduler "
               "threads ({})",
               name, topo.spec.stage_size(), actors,
               sys.scheduler().num_workers(), opts.scheduler);
}

job_options job_options_of(const run_args& args) {
  job_options jopts;
  // Stages report every 0.5 s; refreshing the line once a second shows
  // counts that are at most half a second old.
  jopts.progress_interval = std::chrono::seconds{1};
  jopts.resume = args.resume;
  jopts.connect_timeout = std::chrono::milliseconds{
    static_cast<int64_t>(args.connect_timeout_s * 1000)};
  return jopts;
}

/// LOGDIR/<the topology's name, else its file name>: one TensorBoard run
/// directory per job.
std::string run_dir_of(const run_args& args, const loaded_topology& topo) {
  return (std::filesystem::path{args.logdir}
          / (topo.spec.name().empty()
               ? std::filesystem::path{args.topology}.stem()
               : std::filesystem::path{topo.spec.name()}))
    .string();
}

/// Where the job's progress reports go while it runs: the progress display
/// (unless --no-progress), TensorBoard events (--logdir) and Prometheus
/// (--metrics-port). It must outlive the job.
class job_monitor {
public:
  explicit job_monitor(const run_args& args)
    : display_(isatty(STDERR_FILENO) == 1,
               std::chrono::seconds{args.log_every_s}),
      show_(!args.no_progress) {
  }

  /// Serves --metrics-port; throws when it cannot.
  void open_endpoint(int port) {
    endpoint_ = std::make_shared<metrics_endpoint>(static_cast<uint16_t>(port));
    spdlog::info("Prometheus metrics: http://127.0.0.1:{}/metrics",
                 endpoint_->port());
  }

  /// For job_options::on_progress: empty when nothing watches the job.
  /// Reports before start_events() go to the display and the endpoint only.
  std::function<void(const job_progress&)> on_progress(bool logdir) {
    if (!show_ && !logdir && !endpoint_)
      return {};
    return [&display = display_, show = show_, events = events_,
            scalars = scalars_, endpoint = endpoint_](const job_progress& p) {
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
          caf::anon_send(*a, metrics_atom::value, std::move(events));
        caf::anon_send(*a, metrics_atom::value, step, std::move(values),
                       p.histograms, false);
      }
    };
  }

  /// The job was started again from a checkpoint: scalars continue at its
  /// step.
  void restarted(const job& j) {
    *scalars_ = progress_scalars{
      static_cast<int64_t>(j.resumed_step().value_or(0))};
  }

  /// --logdir: the TensorBoard event writer, once the job has started (its
  /// resumed step is known then).
  void start_events(caf::actor_system& sys, const job& j,
                    const std::string& run_dir) {
    if (auto resumed = j.resumed_step())
      *scalars_ = progress_scalars{static_cast<int64_t>(*resumed)};
    events_actor_ = spawn_event_writer(sys, run_dir, j.resumed_step());
    events_->store(&events_actor_);
  }

  progress_display& display() {
    return display_;
  }

  /// Once the job has ended: clears the live line, and gives the event
  /// writer the final numbers, then waits (a few seconds at most) for it
  /// to have written them.
  void finish(caf::actor_system& sys, const job_progress& final) {
    display_.finish();
    if (!events_actor_)
      return;
    events_->store(nullptr); // (the coordinator has quit: no more reports)
    int64_t step = 0;
    auto values = scalars_->next(final, step);
    auto step_events = scalars_->events(final, values);
    caf::scoped_actor self{sys};
    self->monitor(events_actor_);
    if (!step_events.empty())
      self->send(events_actor_, metrics_atom::value, std::move(step_events));
    self->send(events_actor_, metrics_atom::value, step, std::move(values),
               final.histograms, true);
    self->receive([](caf::down_msg&) {},
                  caf::after(std::chrono::seconds{5}) >> [] {
                    spdlog::warn("TensorBoard events: the writer did not "
                                 "finish within 5 s");
                  });
  }

private:
  progress_display display_;
  bool show_;
  // The event writer, for the progress callback on the coordinator's
  // thread: null until it exists and once the job has ended.
  std::shared_ptr<std::atomic<caf::actor*>> events_ =
    std::make_shared<std::atomic<caf::actor*>>(nullptr);
  caf::actor events_actor_;
  std::shared_ptr<progress_scalars> scalars_ =
    std::make_shared<progress_scalars>();
  std::shared_ptr<metrics_endpoint> endpoint_;
};

/// The summary on stdout (with autotune's decisions), --report-json, and
/// the job's error on stderr.
void print_outcome(const std::string& name, const run_result& result,
                   const std::vector<std::string>& decisions,
                   const run_args& args) {
  print_summary(stdout, name, result);
  if (!args.report_json.empty()) {
    if (auto* f = std::fopen(args.report_json.c_str(), "w")) {
      write_report_json(f, name, result);
      if (std::fclose(f) != 0)
        spdlog::error("--report-json {}: cannot write it", args.report_json);
    } else {
      spdlog::error("--report-json {}: cannot create it", args.report_json);
    }
  }
  for (auto& d : decisions)
    std::printf("  %s\n", d.c_str());
  std::fflush(stdout);
  if (!result.ok)
    std::fprintf(stderr, "actorflow: %s\n", result.error.c_str());
}

// The job of cmd_run in `sys`, to its summary; returns the exit code.
// The runtime's supervisor runs it (autotune, interrupts, restarts after a
// lost node); this only watches and prints. Bounds the shutdown
// (bound_shutdown) once the summary is out.
int run_job(caf::actor_system& sys, const run_args& args,
            const loaded_topology& topo, const engine_options& opts,
            const registry& reg) {
  auto name = topo.spec.name().empty() ? args.topology : topo.spec.name();
  log_job_start(sys, name, topo, opts);
  job_monitor monitor{args};
  if (args.metrics_port >= 0) {
    try {
      monitor.open_endpoint(args.metrics_port);
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "actorflow: %s\n", ex.what());
      return exit_usage;
    }
  }
  supervise_options sopts;
  sopts.job = job_options_of(args);
  sopts.max_restarts = args.max_restarts;
  sopts.interrupts = [] { return signals_received.load(); };
  sopts.prepare = [&](const loaded_topology& to_run, job_options& jopts) {
    monitor.display().set_topology(&to_run.spec);
    jopts.on_progress = monitor.on_progress(!args.logdir.empty());
    install_signal_handlers();
  };
  sopts.started = [&](job& j, int restarts) {
    if (restarts > 0)
      monitor.restarted(j);
    else if (!args.logdir.empty())
      monitor.start_events(sys, j, run_dir_of(args, topo));
  };
  sopts.stopping = [&] { monitor.display().finish(); };
  sopts.aborted = [&] {
    bound_shutdown(exit_interrupted, shutdown_limit(args.shutdown_timeout_s),
                   signals_received);
  };
  auto run = supervise(sys, topo, reg, std::move(sopts));
  if (!run.started) {
    std::fprintf(stderr, "actorflow: %s\n", run.result.error.c_str());
    return exit_failure;
  }
  monitor.finish(sys, run.result.final);
  print_outcome(name, run.result, run.autotune, args);
  auto rc = run.interrupted ? exit_interrupted
                            : (run.result.ok ? exit_ok : exit_failure);
  // From here on (the job's actors stopping, ~actor_system), the process
  // exits within the bound whatever holds it.
  bound_shutdown(rc, shutdown_limit(args.shutdown_timeout_s),
                 signals_received);
  stall_if_asked(sys);
  return rc;
}

int cmd_run(const run_args& args, const registry& reg) {
  if (auto rc = check_tls(run_usage, args.tls); rc >= 0)
    return rc;
  auto loaded = load_topology_file(args.topology, reg);
  if (!loaded.ok()) {
    print_errors(loaded);
    return exit_usage;
  }
  auto& topo = *loaded.topology;
  auto opts = engine_options_of(topo.spec.runtime());
  if (args.threads >= 0)
    opts.threads = static_cast<size_t>(args.threads);
  if (!args.scheduler.empty())
    opts.scheduler = args.scheduler;
  caf::actor_system_config cfg;
  add_message_types(cfg);
  apply(opts, cfg);
  // Stages placed on nodes: connect through CAF's middleman (TLS: through
  // its OpenSSL module).
  if (topo.spec.host_size() > 0)
    enable_network(cfg, args.tls);
  else if (args.tls.enabled())
    spdlog::warn("--tls-cert/--tls-key/--tls-ca: the topology places nothing "
                 "on nodes, so nothing connects");
  caf::actor_system sys{cfg};
  auto rc = run_job(sys, args, topo, opts, reg);
  // Failures before the summary: their shutdown is bounded from here.
  bound_shutdown(rc, shutdown_limit(args.shutdown_timeout_s),
                 signals_received);
  await_exits(shutdown_limit(args.shutdown_timeout_s));
  data_plane::stop(sys);
  return rc;
}

} // namespace

void add_run(CLI::App& app, const registry& reg,
             std::function<int()>& action) {
  auto args = std::make_shared<run_args>();
  auto* run = app.add_subcommand("run", "Run a topology to its end");
  run->add_option("topology", args->topology, "Topology file (.pbtxt)")
    ->required();
  run
    ->add_option("--threads", args->threads,
                 "Scheduler worker threads (default: the topology's "
                 "runtime.threads, else the usable cores)")
    ->check(CLI::NonNegativeNumber);
  run
    ->add_option("--scheduler", args->scheduler,
                 "CAF scheduler policy (default: the topology's, else "
                 "sharing)")
    ->check(CLI::IsMember({"stealing", "sharing"}));
  run
    ->add_option("--log-every", args->log_every_s,
                 "Seconds between progress log lines when stderr is not a "
                 "terminal")
    ->check(CLI::PositiveNumber)
    ->capture_default_str();
  run->add_flag("--no-progress", args->no_progress,
                "Print no progress while running");
  run->add_flag("--resume", args->resume,
                "Continue from the newest complete checkpoint in the "
                "topology's checkpoint.dir (start from the beginning when "
                "there is none yet); see docs/checkpoints.md");
  run->add_option("--logdir", args->logdir,
                  "Write TensorBoard event files into LOGDIR/<topology "
                  "name> (docs/monitoring.md); `tensorboard --logdir "
                  "LOGDIR` shows them");
  run
    ->add_option("--metrics-port", args->metrics_port,
                 "Serve the job's numbers (those --logdir writes) in "
                 "Prometheus text format at http://127.0.0.1:PORT/metrics "
                 "while it runs (0: a free port, logged)")
    ->check(CLI::Range(0, 65535))
    ->type_name("PORT");
  run->add_option("--report-json", args->report_json,
                  "Also write the final report (every stage's replicas, "
                  "items/s, busy and waiting shares, the bottleneck) as "
                  "JSON to FILE (docs/monitoring.md)");
  add_tls_options(run, args->tls);
  add_shutdown_option(run, args->shutdown_timeout_s);
  run
    ->add_option("--max-restarts", args->max_restarts,
                 "With checkpoints: how many times a job that lost a node "
                 "is started again from its newest checkpoint, with the "
                 "lost node's replicas on other hosts of their placement "
                 "(docs/multi-host.md; 0: never)")
    ->check(CLI::NonNegativeNumber)
    ->capture_default_str();
  run
    ->add_option("--connect-timeout", args->connect_timeout_s,
                 "Seconds to connect to each node (TCP, TLS and CAF's "
                 "handshake, tried again while they last when a handshake "
                 "times out) before the job fails")
    ->check(CLI::Range(0.1, 3600.0))
    ->type_name("SECONDS")
    ->capture_default_str();
  run->callback([args, &reg, &action] {
    action = [args, &reg] { return cmd_run(*args, reg); };
  });
}

} // namespace af::cli
