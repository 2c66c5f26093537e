// TorchScript module files on libtorch: what a module holds
// (read_torchscript) and a module with new values (torchscript_with_values,
// `actorflow export`); and the plugin's entry point, its backend
// (actors/training/torchscript_plugin.hpp). Compiled only when CMake found libtorch.
#include "actorflow/actors/training/detail/torchscript_libtorch.hpp"
#include "actorflow/actors/training/torchscript_plugin.hpp"

#include <sstream>
#include <stdexcept>

#include "actorflow/gpu/layers.hpp"

namespace af {

namespace detail {

// What a libtorch error says, in one line: the last one (its messages
// start with a TorchScript traceback, and c10::Error's what() ends with a
// C++ backtrace that what_without_backtrace leaves out).
std::string gist(const std::string& what) {
  auto end = what.find_last_not_of(" \n\r\t");
  if (end == std::string::npos)
    return what;
  auto begin = what.rfind('\n', end);
  begin = begin == std::string::npos ? 0 : begin + 1;
  begin = what.find_first_not_of(" \t", begin);
  return what.substr(begin, end + 1 - begin);
}

std::string first_line(const c10::Error& e) {
  return gist(e.what_without_backtrace());
}

torch::jit::Module load_module(const std::string& bytes,
                               const std::string& file) {
  std::istringstream in{bytes};
  try {
    return torch::jit::load(in, torch::kCPU);
  } catch (const c10::Error& e) {
    throw std::invalid_argument("'" + file
                                + "' is not a TorchScript file that "
                                  "torch.jit.load can read (torch.jit.save "
                                  "writes one): "
                                + first_line(e));
  }
}

std::vector<int64_t> shape_of(const torch::Tensor& t) {
  return {t.sizes().begin(), t.sizes().end()};
}

std::string shape_text(const std::vector<int64_t>& s) {
  return gpu::shape_string(s);
}

// A tensor's values as floats (row-major).
std::shared_ptr<const std::vector<float>> floats_of(const torch::Tensor& t) {
  auto f = t.detach().to(torch::kFloat).contiguous();
  auto* p = f.data_ptr<float>();
  return std::make_shared<const std::vector<float>>(p, p + f.numel());
}

std::vector<std::string> forward_args(const torch::jit::Module& m,
                                      const std::string& file) {
  auto method = m.find_method("forward");
  if (!method)
    throw std::invalid_argument("'" + file + "' has no forward method");
  std::vector<std::string> names;
  auto& args = method->function().getSchema().arguments();
  for (size_t i = 1; i < args.size(); ++i) // 0: self
    names.push_back(args[i].name());
  return names;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (auto& x : v)
    s += (s.empty() ? "" : ", ") + x;
  return s;
}

std::string device_note() {
  return "the libtorch it links has no CUDA; docs/training.md, \"Your own "
         "model\", says how to build against one that has";
}

torchscript_info read_module(const std::string& bytes,
                                  const std::string& file,
                                  const std::vector<std::string>& inputs) {
  auto m = load_module(bytes, file);
  torchscript_info info;
  info.args = forward_args(m, file);
  if (info.args.size() != inputs.size())
    throw std::invalid_argument(
      "forward of '" + file + "' takes (" + joined(info.args)
      + "), training.model.inputs lists (" + joined(inputs)
      + "): forward takes the inputs' fields, in their order");
  for (size_t i = 0; i < inputs.size(); ++i)
    if (info.args[i] != inputs[i])
      throw std::invalid_argument(
        "forward of '" + file + "' takes '" + info.args[i]
        + "' where training.model.inputs[" + std::to_string(i)
        + "] is field '" + inputs[i]
        + "': name forward's arguments as the fields, in the order of "
          "training.model.inputs");
  for (const auto& p : m.named_parameters(/*recurse=*/true)) {
    if (p.value.scalar_type() != torch::kFloat)
      throw std::invalid_argument(
        "parameter '" + p.name + "' of '" + file + "' is "
        + std::string(c10::toString(p.value.scalar_type()))
        + "; ActorFlow trains float32 parameters (call .float() on the "
          "module before torch.jit.script)");
    gpu::param_spec s;
    s.name = p.name;
    s.shape = shape_of(p.value);
    s.initial = floats_of(p.value);
    info.variables.push_back(std::move(s));
  }
  for (const auto& b : m.named_buffers(/*recurse=*/true)) {
    auto t = b.value.scalar_type();
    if (!c10::isFloatingType(t) && !c10::isIntegralType(t, false))
      throw std::invalid_argument(
        "buffer '" + b.name + "' of '" + file + "' is "
        + std::string(c10::toString(t))
        + "; the shards keep floating-point and integer buffers only");
    gpu::param_spec s;
    s.name = b.name;
    s.shape = shape_of(b.value);
    s.buffer = true;
    s.initial = floats_of(b.value);
    info.variables.push_back(std::move(s));
  }
  return info;
}

std::string module_with_values(
  const std::string& bytes, const std::string& file,
  const std::map<std::string, std::vector<float>>& values) {
  auto m = load_module(bytes, file);
  torch::NoGradGuard no_grad;
  auto set = [&](const std::string& name, torch::Tensor t) {
    auto it = values.find(name);
    if (it == values.end())
      throw std::invalid_argument("the checkpoint has no variable '" + name
                                  + "' of '" + file + "'");
    if (static_cast<int64_t>(it->second.size()) != t.numel())
      throw std::invalid_argument(
        "variable '" + name + "' has " + std::to_string(it->second.size())
        + " values in the checkpoint, '" + file + "' has "
        + std::to_string(t.numel()) + " (shape " + shape_text(shape_of(t))
        + ")");
    auto src = torch::from_blob(const_cast<float*>(it->second.data()),
                                t.sizes(), torch::kFloat);
    if (t.is_floating_point())
      t.copy_(src);
    else
      t.copy_(src.round());
  };
  for (const auto& p : m.named_parameters(true))
    set(p.name, p.value);
  for (const auto& b : m.named_buffers(true))
    set(b.name, b.value);
  std::ostringstream out;
  m.save(out);
  return out.str();
}

namespace {

class libtorch_backend final : public backend {
public:
  const char* abi() const noexcept override {
    return AF_TORCHSCRIPT_ABI;
  }
  std::string device_note() const override {
    return detail::device_note();
  }
  torchscript_info read(const std::string& bytes, const std::string& file,
                        const std::vector<std::string>& inputs) const override {
    return read_module(bytes, file, inputs);
  }
  std::string with_values(
    const std::string& bytes, const std::string& file,
    const std::map<std::string, std::vector<float>>& values) const override {
    return module_with_values(bytes, file, values);
  }
  std::unique_ptr<model_impl> open(const training_spec& spec,
                                   gpu::device& dev,
                                   bool train) const override {
    return open_model(spec, dev, train);
  }
};

} // namespace

} // namespace detail

} // namespace af

extern "C" __attribute__((visibility("default")))
const af::detail::backend*
af_torchscript_backend_v1() {
  static const af::detail::libtorch_backend b;
  return &b;
}
