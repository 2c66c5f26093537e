// A model: a list of layers (gpu/layers.hpp) and a loss, declared in the
// topology file and run on one device. The trainer and evaluator own one
// each; the parameter-server shards only need param_specs() and
// initial_value() to own and initialise the variables.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actorflow/gpu/device.hpp"
#include "actorflow/gpu/params.hpp"

namespace af::gpu {

/// One layer as the topology declares it. Unused fields stay at 0.
struct layer_spec {
  /// "dense", "relu", "conv2d", "maxpool2d", "flatten", "dropout",
  /// "embedding", "features".
  std::string type;
  int64_t units = 0;   // dense: output features
  int64_t filters = 0; // conv2d: output channels
  int64_t kernel = 0;  // conv2d: square kernel size
  int64_t stride = 1;  // conv2d
  int64_t padding = 0; // conv2d: zero padding on each side
  int64_t pool = 2;    // maxpool2d: square window
  int64_t pool_stride = 0; // maxpool2d: 0 = the window
  double rate = 0;     // dropout: probability of dropping, [0, 1)
  int64_t rows = 0;    // embedding: rows of the table (ids are 0..rows-1)
  int64_t dim = 0;     // embedding, features: floats per row
  int64_t ids = 0;     // features: ids per sample (the rest are floats)
};

struct model_spec {
  /// Shape of one sample's input. Dense inputs: e.g. {784} or {1, 28, 28}
  /// (channels, height, width for conv2d). An embedding first layer takes
  /// {F}: F ids per sample; a features first layer {F + D}: F ids and D
  /// floats per sample (gpu/layers.hpp).
  std::vector<int64_t> input_shape;
  std::vector<layer_spec> layers;
  /// "softmax_cross_entropy" (last layer's width = classes) or
  /// "sigmoid_binary_cross_entropy" (last layer's width = 1).
  std::string loss;
};

/// Checks that the layers fit the input and each other and derives the
/// parameters. Throws std::invalid_argument with a message naming the
/// layer ("layer 2 (dense): ...") and the shapes that do not fit. dense
/// flattens any input itself (flatten is optional); conv2d and maxpool2d
/// need [c, h, w]; embedding must be first (gpu/layers.hpp).
std::vector<param_spec> param_specs(const model_spec& spec);

/// Outputs per sample of the last layer.
int64_t output_width(const model_spec& spec);

/// Forward and backward of a whole model on one device.
class model : public param_store {
public:
  /// Throws std::invalid_argument as param_specs() does.
  model(model_spec spec, device& dev);
  ~model() override;
  model(const model&) = delete;
  model& operator=(const model&) = delete;

  const model_spec& spec() const noexcept;
  const std::vector<param_spec>& params() const noexcept override;
  device& dev() noexcept override;
  darray& value(size_t i) override;
  darray& grad(size_t i) override;
  void set_local_rows(size_t i, int64_t rows) override;

  struct step_result {
    double loss_sum = 0; // summed over the batch
    int64_t correct = 0; // softmax: argmax == label; sigmoid: (p>0.5) == label
  };

  /// Forward and backward over `n` samples already on the device.
  /// `x`: float [n, input...] or, for an embedding first layer, int32
  /// [n, F] local row indices; for a features first layer, those int32
  /// [n, F] followed by float [n, D]. `labels`: int32 [n] (softmax) or float [n]
  /// (sigmoid). Afterwards grad(i) holds the SUM over the batch of the
  /// per-sample gradients (the parameter server divides by the samples).
  /// Dropout masks come from `seed`.
  step_result train_step(const void* x, const void* labels, int n,
                         uint64_t seed);

  /// Forward only, dropout off. When `logits` is not null it receives the
  /// last layer's outputs [n, output_width] on the host.
  step_result evaluate(const void* x, const void* labels, int n,
                       std::vector<float>* logits);

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace af::gpu
