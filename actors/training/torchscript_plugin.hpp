// The seam between af_actors and the TorchScript backend, a plugin that
// dlopen loads on the first use of a TorchScript model
// (libactorflow_torchscript.so, built when CMake finds libtorch). Only a
// process that runs or checks a TorchScript model pays for libtorch's
// loading (0.1 s, 2–3 s under the sanitizers) and its memory; every other
// actorflow, node and test does not.
//
// The plugin is compiled against these headers and resolves af's symbols
// from the executable that loads it: that executable must export them
// (af_actors' link option --export-dynamic does it for every executable
// that links it). Private to actors/torchscript_*.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actorflow/actors/training/host_batch.hpp"
#include "actorflow/actors/training/torchscript_model.hpp"
#include "actorflow/actors/training/training_spec.hpp"
#include "actorflow/gpu/model.hpp"
#include "actorflow/gpu/params.hpp"
#include "actorflow/runtime/core/batch.hpp"

namespace af::detail {

/// One loaded module: torchscript_model's work (its methods say what).
class model_impl {
public:
  virtual ~model_impl() = default;
  virtual const std::vector<gpu::param_spec>& params() const noexcept = 0;
  virtual gpu::device& dev() noexcept = 0;
  virtual gpu::darray& value(size_t i) = 0;
  virtual gpu::darray& grad(size_t i) = 0;
  virtual void set_local_rows(size_t i, int64_t rows) = 0;
  virtual void stage(const batch& b, host_batch& out, bool labels,
                     const std::string& reference) const = 0;
  virtual gpu::model::step_result train_step(const host_batch& h) = 0;
  virtual gpu::model::step_result evaluate(const host_batch& h,
                                           const std::vector<int64_t>& rows,
                                           std::vector<float>& scores,
                                           int64_t& classes) = 0;
};

/// What the plugin offers: the free functions of torchscript_model.hpp and
/// a model's constructor.
class backend {
public:
  /// The build the plugin belongs to (AF_TORCHSCRIPT_ABI: version, build
  /// type, sanitizers): a plugin of another build is refused, since the
  /// classes it shares with the executable may be laid out differently.
  virtual const char* abi() const noexcept = 0;
  virtual std::string device_note() const = 0;
  virtual torchscript_info read(const std::string& bytes,
                                const std::string& file,
                                const std::vector<std::string>& inputs) const
    = 0;
  virtual std::string
  with_values(const std::string& bytes, const std::string& file,
              const std::map<std::string, std::vector<float>>& values) const
    = 0;
  virtual std::unique_ptr<model_impl>
  open(const training_spec& spec, gpu::device& dev, bool train) const = 0;

protected:
  ~backend() = default;
};

} // namespace af::detail

/// The plugin's one exported symbol: its backend, which lives as long as
/// the process (the plugin is never unloaded).
#define AF_TORCHSCRIPT_ENTRY "af_torchscript_backend_v1"
extern "C" {
using af_torchscript_entry_fn = const af::detail::backend* (*)();
}
