// `actorflow export`: a checkpoint's trained parameters and buffers written
// back into the TorchScript module they came from, for torch.jit.load
// (serving, fine-tuning).
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace af::cli {

void add_export(CLI::App& app, std::function<int()>& action);

} // namespace af::cli
