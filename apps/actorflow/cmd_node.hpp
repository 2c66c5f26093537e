// `actorflow node`: serves the stages and shards that jobs place on this
// host, until SIGINT or SIGTERM.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

#include "actorflow/runtime/stage/registry.hpp"

namespace af::cli {

/// Adds the subcommand to `app`; when it is parsed, `action` is set to
/// what runs it (returning the exit code) with the stage types of `reg`,
/// which must be filled by then.
void add_node(CLI::App& app, const registry& reg,
              std::function<int()>& action);

} // namespace af::cli
