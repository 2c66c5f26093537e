// What the two libtorch sources of TorchScript models share
// (torchscript_file.cpp: reading and writing module files;
// torchscript_model.cpp: running one). Private to them: it includes
// libtorch's headers.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/script.h>

namespace af::torchscript_detail {

/// A libtorch error's message in one line (its last).
std::string gist(const std::string& what);
std::string first_line(const c10::Error& e);
/// The module in `bytes`; throws std::invalid_argument naming `file`.
torch::jit::Module load_module(const std::string& bytes,
                               const std::string& file);
std::vector<int64_t> shape_of(const torch::Tensor& t);
std::string shape_text(const std::vector<int64_t>& s);

} // namespace af::torchscript_detail
