// `actorflow inspect`: what a TFRecord file holds, and whether every record
// is intact.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace af::cli {

void add_inspect(CLI::App& app, std::function<int()>& action);

} // namespace af::cli
