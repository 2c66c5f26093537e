// actorflow: run and check ActorFlow topologies.
//
// Exit codes (apps/actorflow/options.hpp): 0 success, 1 runtime failure,
// 2 usage or validation error, 130 stopped by Ctrl-C (SIGINT) or SIGTERM.
#include <cstdio>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "actorflow/actors/builtin.hpp"
#include "actorflow/runtime/stage/registry.hpp"
#include "actorflow/version.hpp"
#include "apps/actorflow/cmd_node.hpp"
#include "apps/actorflow/cmd_run.hpp"
#include "apps/actorflow/cmd_validate.hpp"
#include "apps/actorflow/convert.hpp"
#include "apps/actorflow/export.hpp"
#include "apps/actorflow/generate.hpp"
#include "apps/actorflow/inspect.hpp"
#include "apps/actorflow/options.hpp"

int main(int argc, char** argv) {
  using namespace af::cli;
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

  // Filled after parsing; the commands' actions use it only when they run.
  af::registry reg;
  // What the parsed subcommand runs (its callback sets it).
  std::function<int()> action;
  add_run(app, reg, action);
  add_validate(app, reg, action);
  add_node(app, reg, action);
  add_convert(app, action);
  add_generate(app, action);
  add_inspect(app, action);
  add_export(app, action);

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

  af::register_builtin_stages(reg);
  try {
    return action ? action() : exit_usage;
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "actorflow: %s\n", ex.what());
    return exit_failure;
  }
}
