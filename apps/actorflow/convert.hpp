// `actorflow convert`: datasets into TFRecord files of tf.Example records.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace af::cli {

/// Adds the subcommand to `app`; when it is parsed, `action` is set to
/// what runs it (returning the exit code).
void add_convert(CLI::App& app, std::function<int()>& action);

} // namespace af::cli
