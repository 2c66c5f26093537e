// The C++ side of bench/python/run.sh's per-batch overhead: how fast an
// application's CAF actor receives the batches of an `outlet` stage when
// it answers each at once (docs/embedding.md), to compare with Python's
// iterator on the same topology (outlet_rate.py).
//
//   outlet_rate TOPOLOGY [--outlet out] [--threads 2]
//
// Prints one JSON line: batches, seconds, batches_per_s.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>

#include "actorflow/actors/actorflow.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Batches per second through an outlet to a C++ actor"};
  std::string path;
  std::string outlet = "out";
  size_t threads = 2;
  app.add_option("topology", path, "Topology file")->required();
  app.add_option("--outlet", outlet, "The outlet stage");
  app.add_option("--threads", threads, "Scheduler threads");
  CLI11_PARSE(app, argc, argv);

  af::registry reg;
  af::register_builtin_stages(reg);
  auto loaded = af::load_topology_file(path, reg);
  if (!loaded.ok()) {
    for (auto& e : loaded.errors)
      std::fprintf(stderr, "%s\n", e.to_string().c_str());
    return 2;
  }
  caf::actor_system_config cfg;
  af::add_message_types(cfg);
  af::engine_options eo;
  eo.threads = threads;
  af::apply(eo, cfg);
  caf::actor_system sys{cfg};
  auto count = std::make_shared<std::atomic<uint64_t>>(0);
  auto receiver = sys.spawn([count](caf::event_based_actor* self) {
    return caf::behavior{
      [count](af::outlet_atom, const std::string&, const af::batch&) {
        count->fetch_add(1, std::memory_order_relaxed);
      },
      [](af::job_progress_atom, const af::job_progress&) {},
      [self](af::job_done_atom, const af::run_result&) { self->quit(); },
    };
  });
  af::job_options opts;
  opts.outlets[outlet] = receiver;
  opts.listener = receiver;
  auto start = std::chrono::steady_clock::now();
  auto job = af::job::start(sys, *loaded.topology, reg, opts);
  auto result = job.wait();
  double seconds = std::chrono::duration<double>(
                     std::chrono::steady_clock::now() - start)
                     .count();
  if (!result.ok) {
    std::fprintf(stderr, "outlet_rate: %s\n", result.error.c_str());
    return 1;
  }
  auto n = count->load();
  std::printf("{\"side\": \"c++\", \"batches\": %llu, \"seconds\": %.4f, "
              "\"batches_per_s\": %.1f}\n",
              static_cast<unsigned long long>(n), seconds, n / seconds);
  return 0;
}
