// The trainable variables of a model, as the parameter servers and the
// worker side of their protocol (runtime/ps/ps_client.hpp) see them: a list of
// variables with shapes, and device storage for each variable's values and
// gradient. Two kinds of model provide it: the built-in layers
// (gpu/model.hpp) and a TorchScript module (actors/training/torchscript_model.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actorflow/gpu/device.hpp"

namespace af::gpu {

/// One trainable variable.
struct param_spec {
  std::string name; // "<layer index>_<type>/<kernel|bias|table>", e.g. "0_dense/kernel"
  std::vector<int64_t> shape;
  /// Embedding tables: pulled and pushed by row, sharded by row.
  bool sparse = false;
  /// Glorot-uniform limit sqrt(6 / (fan_in + fan_out)); 0 for biases
  /// (initialised to 0).
  float init_limit = 0;
  /// A TorchScript module's buffer (e.g. batch norm's running statistics),
  /// not a parameter: a push carries the change that the step made to it,
  /// which the shards add as it is: no optimizer, no learning rate, no
  /// division by the samples, never top-k.
  bool buffer = false;
  /// The initial values (size() floats, row-major), when they come from a
  /// file (a TorchScript module's); null: drawn from the job seed.
  std::shared_ptr<const std::vector<float>> initial;
  int64_t size() const noexcept;
  /// Floats per row (sparse: dim; dense: the last dimension).
  int64_t row_size() const noexcept;
};

/// The initial value of element `element` (row-major index in the full
/// variable) of `p`: from p.initial when set, otherwise from the job seed
/// only: every shard, whatever its slice, and every run compute the same
/// value.
float initial_value(const param_spec& p, uint64_t seed, uint64_t element);

/// A model's variables in device memory, for pulls and pushes.
class param_store {
public:
  virtual ~param_store();
  /// Every variable, in the order the shards number them.
  virtual const std::vector<param_spec>& params() const noexcept = 0;
  virtual device& dev() noexcept = 0;
  /// Device storage of variable i and of its gradient. Dense: the whole
  /// variable. Sparse: a local table of the rows this step touches (see
  /// set_local_rows), row j of it standing for the j-th distinct id.
  virtual darray& value(size_t i) = 0;
  virtual darray& grad(size_t i) = 0;
  /// Sparse variable i holds `rows` rows this step (reallocates if
  /// needed; contents undefined until uploaded). Throws
  /// std::invalid_argument for a dense variable.
  virtual void set_local_rows(size_t i, int64_t rows) = 0;
};

} // namespace af::gpu
