// TorchScript models in a build without libtorch: every way in says which
// library is missing and how to get it (actors/torchscript_model.hpp).
#include "actors/torchscript_model.hpp"

#include <stdexcept>

namespace af {

namespace {

const char* missing =
  "this actorflow was built without libtorch, which TorchScript models "
  "need: install Debian's libtorch-dev (scripts/setup does) and build again";

[[noreturn]] void refuse(const std::string& file) {
  throw std::invalid_argument("cannot run the TorchScript model '" + file
                              + "': " + missing);
}

} // namespace

bool torchscript_available(std::string* why) {
  if (why != nullptr)
    *why = missing;
  return false;
}

std::string torchscript_device_note() {
  return missing;
}

torchscript_info read_torchscript(const std::string&, const std::string& file,
                                  const std::vector<std::string>&) {
  refuse(file);
}

std::string
torchscript_with_values(const std::string&, const std::string& file,
                        const std::map<std::string, std::vector<float>>&) {
  refuse(file);
}

struct torchscript_model::impl {};

torchscript_model::torchscript_model(const training_spec& spec, gpu::device&,
                                     bool) {
  refuse(spec.torchscript ? spec.torchscript->file : std::string{});
}

torchscript_model::~torchscript_model() = default;

// (Unreachable: no model is ever constructed.)
const std::vector<gpu::param_spec>& torchscript_model::params() const noexcept {
  static const std::vector<gpu::param_spec> none;
  return none;
}
gpu::device& torchscript_model::dev() noexcept {
  std::terminate();
}
gpu::darray& torchscript_model::value(size_t) {
  refuse({});
}
gpu::darray& torchscript_model::grad(size_t) {
  refuse({});
}
void torchscript_model::set_local_rows(size_t, int64_t) {
  refuse({});
}
void torchscript_model::stage(const batch&, host_batch&, bool,
                              const std::string&) const {
  refuse({});
}
gpu::model::step_result torchscript_model::train_step(const host_batch&) {
  refuse({});
}
gpu::model::step_result
torchscript_model::evaluate(const host_batch&, const std::vector<int64_t>&,
                            std::vector<float>&, int64_t&) {
  refuse({});
}

} // namespace af
