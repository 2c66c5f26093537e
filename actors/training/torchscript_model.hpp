// A TorchScript module as the job's model (training.model.torchscript):
// the user's own PyTorch model, scripted with torch.jit.script and saved
// with torch.jit.save, trained by the trainers against the parameter
// servers like a model of the built-in layers (docs/training.md, "Your own
// model").
//
// The contract:
// - forward takes the topology's training.model.inputs, in that order and
//   named as the fields: a numeric input as the batch's tensor (its dtype
//   and shape: f32, f64, i64, i32 or u8), a categorical one as the rows
//   its ids look up in the engine's embedding tables, float [ids' shape...,
//   embedding_dim].
// - It returns the batch's mean loss (a scalar), or a tuple (mean loss,
//   predictions): [n, classes] scores (the evaluator reports accuracy of
//   their argmax) or [n] / [n, 1] scores of the positive class (AUC).
// - Every named_parameters() tensor is a dense PS variable, initialised
//   from the file; every floating-point or integer named_buffers() tensor
//   is a buffer variable (gpu::param_spec::buffer): each push carries the
//   change the step made to it, which the shards add. The embedding tables
//   are one sparse variable, "tables", after them.
//
// libtorch is optional at build time, and loaded only when a TorchScript
// model is used: the backend is a plugin (actors/training/torchscript_plugin.hpp).
// Without it, read_torchscript and the model's constructor throw, naming
// what is missing.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actorflow/actors/training/host_batch.hpp"
#include "actorflow/actors/training/training_spec.hpp"
#include "actorflow/gpu/model.hpp"
#include "actorflow/gpu/params.hpp"
#include "actorflow/runtime/core/batch.hpp"

namespace af {

namespace detail {
class model_impl;
}

/// Whether TorchScript models can run here (the backend plugin and its
/// libtorch load; the first call loads them); when false, `why` says what
/// is missing and how to get it.
bool torchscript_available(std::string* why = nullptr);

/// Why the CUDA device is not offered to TorchScript models: the libtorch
/// this build links has no CUDA (Debian's is CPU-only).
std::string torchscript_device_note();

/// What a module holds, read from its bytes.
struct torchscript_info {
  /// Its parameters, then its buffers, in the module's order (names as
  /// named_parameters / named_buffers give them), each with its initial
  /// values from the file.
  std::vector<gpu::param_spec> variables;
  /// forward's arguments, without self.
  std::vector<std::string> args;
};

/// Loads `bytes` (of the file `file`) and checks forward's arguments
/// against `inputs` (the batch fields it takes, in order). Throws
/// std::invalid_argument naming the file: not a TorchScript file, no
/// forward, arguments other than the fields, a parameter that is not
/// floating point, a buffer of another dtype than floats or integers; or,
/// without libtorch, naming the missing library.
torchscript_info read_torchscript(const std::string& bytes,
                                  const std::string& file,
                                  const std::vector<std::string>& inputs);

/// The module `bytes` with its parameters and buffers set to `values` (by
/// name; each must have the module's number of elements), as torch.jit.save
/// writes it. Throws std::invalid_argument naming the variable that is
/// missing or of another size.
std::string torchscript_with_values(
  const std::string& bytes, const std::string& file,
  const std::map<std::string, std::vector<float>>& values);

/// The module run on the CPU device: pulls land in its parameters and
/// buffers, its gradients go out in pushes.
class torchscript_model : public gpu::param_store {
public:
  /// `spec.torchscript` must be set. `train`: forward in training mode
  /// (a trainer) or in eval mode (the evaluator). Throws
  /// std::invalid_argument for a device other than the CPU, as
  /// read_torchscript does, or without libtorch.
  torchscript_model(const training_spec& spec, gpu::device& dev, bool train);
  ~torchscript_model() override;
  torchscript_model(const torchscript_model&) = delete;
  torchscript_model& operator=(const torchscript_model&) = delete;

  const std::vector<gpu::param_spec>& params() const noexcept override;
  gpu::device& dev() noexcept override;
  gpu::darray& value(size_t i) override;
  gpu::darray& grad(size_t i) override;
  void set_local_rows(size_t i, int64_t rows) override;

  /// Takes the batch's inputs into `out` (n, epoch, the table rows its ids
  /// touch, sorted, in out.rows; the fields themselves in out.staged).
  /// `labels`: also the label field's values into out.classes and
  /// out.binary (the evaluator's), and the f32 field `reference` (if not
  /// empty) into out.reference. Throws af::input_error naming a missing
  /// field, an id outside its table, or a field of another record count.
  void stage(const batch& b, host_batch& out, bool labels,
             const std::string& reference = "") const;

  /// Forward and backward on a staged batch whose rows were pulled (the
  /// local table is out.rows in order): grad(i) then holds the batch's
  /// gradient summed over its samples (the mean loss's gradient times n),
  /// a buffer's grad the change the forward made to it. Throws
  /// af::input_error naming the file and the fields' dtypes and shapes
  /// when forward refuses them, or when it returns no scalar loss.
  gpu::model::step_result train_step(const host_batch& h);

  /// Forward in eval mode, no gradients, the local table being `rows` (a
  /// superset of h.rows, sorted). Returns the loss summed over the batch
  /// and, when the module returns predictions, the correct ones of
  /// [n, classes] scores (argmax == label). `scores`: the predictions are
  /// appended as floats, record by record ([n] or [n, 1]: the positive
  /// class's score; [n, classes]: the classes' scores); `classes` is set
  /// to the predictions' width (0: none returned, nothing appended).
  gpu::model::step_result evaluate(const host_batch& h,
                                   const std::vector<int64_t>& rows,
                                   std::vector<float>& scores,
                                   int64_t& classes);

private:
  std::unique_ptr<detail::model_impl> impl_;
};

} // namespace af
