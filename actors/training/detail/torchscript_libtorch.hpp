// What the two libtorch sources of TorchScript models share
// (torchscript_file.cpp: reading and writing module files;
// torchscript_model.cpp: running one). Private to them: it includes
// libtorch's headers.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/script.h>

#include "actorflow/actors/training/torchscript_plugin.hpp"

namespace af::detail {

/// A libtorch error's message in one line (its last).
std::string gist(const std::string& what);
std::string first_line(const c10::Error& e);
/// The module in `bytes`; throws std::invalid_argument naming `file`.
torch::jit::Module load_module(const std::string& bytes,
                               const std::string& file);
std::vector<int64_t> shape_of(const torch::Tensor& t);
std::string shape_text(const std::vector<int64_t>& s);

/// The backend's work (actors/training/torchscript_plugin.hpp): what device_note,
/// read_torchscript and torchscript_with_values of torchscript_model.hpp
/// say, and a model's constructor.
std::string device_note();
torchscript_info read_module(const std::string& bytes, const std::string& file,
                             const std::vector<std::string>& inputs);
std::string
module_with_values(const std::string& bytes, const std::string& file,
                   const std::map<std::string, std::vector<float>>& values);
std::unique_ptr<model_impl> open_model(const training_spec& spec,
                                       gpu::device& dev, bool train);

} // namespace af::detail
