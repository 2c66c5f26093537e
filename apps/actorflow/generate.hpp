// `actorflow generate`: synthetic datasets with a known best model. Today
// one: `generate criteo`, a Criteo-like click log (train.csv, test.csv)
// whose labels come from a planted logistic model, described in
// planted.json (docs/generate.md).
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace af::cli {

/// Adds the subcommand to `app`; when it is parsed, `action` is set to
/// what runs it (returning the exit code: 0, 1 when writing fails part
/// way, 2 for bad arguments or an --out folder that cannot be written).
void add_generate(CLI::App& app, std::function<int()>& action);

} // namespace af::cli
