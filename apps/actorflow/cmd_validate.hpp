// `actorflow validate`: checks a topology file (and lists the stage types).
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

#include "actorflow/runtime/stage/registry.hpp"

namespace af::cli {

/// Adds the subcommand to `app`; when it is parsed, `action` is set to
/// what runs it (returning the exit code) with the stage types of `reg`,
/// which must be filled by then.
void add_validate(CLI::App& app, const registry& reg,
                  std::function<int()>& action);

} // namespace af::cli
