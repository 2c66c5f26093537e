// Layers: one class per layer type of the topology (gpu/model.hpp's
// layer_spec), each built only from device primitives (gpu/device.hpp), so
// the same code runs on the CPU and the CUDA device.
//
// A layer is made from its spec and the per-sample shape of its input;
// construction checks that the two fit and throws std::invalid_argument
// naming the layer ("layer 2 (dense): ...") when they do not. Afterwards
// it knows its output shape and the parameters it declares.
//
// Shapes here are per sample; the batch size n is given to each call.
// Activations are row-major [n, shape...] float32 (NCHW for images).
//
// Decisions a topology author should know:
// - dense flattens any input itself: after [c, h, w] it takes c*h*w
//   features, so a flatten layer is optional (it is a free reshape).
// - conv2d and maxpool2d need a [channels, height, width] input.
// - embedding must be the first layer; it takes F int32 local row indices
//   per sample and outputs [F, dim]. Its table is initialised uniformly in
//   [-0.05, 0.05] (Keras' default), not by Glorot: a row's fan-in is 1.
// - features (a model with named inputs, actors/training/training_spec.hpp) must be
//   the first layer too: its input is `ids` int32 local row indices per
//   sample for all n samples, [n, F], followed by D floats per sample,
//   [n, D]; it outputs [F * dim + D], each sample's rows gathered from its
//   one table (all embedding tables laid end to end) and then its floats.
//   Its table is initialised as embedding's.
// - dropout scales kept values by 1 / (1 - rate) while training and is the
//   identity otherwise. Layer i's masks use the seed
//   mix64(step seed ^ mix64(i)) (runtime/core/random.hpp), so two dropout layers
//   in one model draw different masks.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "actorflow/gpu/device.hpp"
#include "actorflow/gpu/model.hpp"

namespace af::gpu {

/// The layer types a topology's `layer` may name, in the order error
/// messages list them ("features" is made from a model's named inputs).
inline constexpr const char* known_layer_types =
  "dense, relu, conv2d, maxpool2d, flatten, dropout, embedding";

/// What a layer's forward and backward see of one of its parameters.
struct param_ref {
  const float* value = nullptr;
  /// Backward overwrites it with this batch's gradient (a sum over the
  /// samples).
  float* grad = nullptr;
  /// Floats in value and grad (sparse: local rows * dim).
  int64_t size = 0;
};

/// The batch a call works on.
struct pass {
  device& dev;
  int n = 0;
  /// Dropout drops only while training.
  bool training = false;
  /// The step's seed; layers derive their own from it.
  uint64_t seed = 0;
};

class layer {
public:
  virtual ~layer();
  layer(const layer&) = delete;
  layer& operator=(const layer&) = delete;

  int index() const noexcept { return index_; }
  const std::string& type() const noexcept { return type_; }
  const std::vector<int64_t>& in_shape() const noexcept { return in_; }
  const std::vector<int64_t>& out_shape() const noexcept { return out_; }
  /// Floats (or, for embedding, ids) per sample.
  int64_t in_size() const noexcept;
  int64_t out_size() const noexcept;
  /// The parameters in the order forward/backward take them.
  const std::vector<param_spec>& params() const noexcept { return params_; }

  /// The output is the input itself (flatten): the model passes the same
  /// buffer on and never calls forward or backward.
  virtual bool aliases_input() const noexcept { return false; }
  /// The input is int32 ids rather than floats (embedding, features).
  virtual bool takes_ids() const noexcept { return false; }

  /// y [n, out] from x [n, in].
  virtual void forward(const pass& p, const void* x, float* y,
                       std::span<const param_ref> params) = 0;
  /// Sets every params[j].grad from dy and, when dx is not nullptr, dx.
  /// x and y are what the last forward saw and produced for this batch.
  virtual void backward(const pass& p, const void* x, const float* y,
                        const float* dy, float* dx,
                        std::span<const param_ref> params) = 0;

protected:
  layer(int index, std::string type, std::vector<int64_t> in);
  /// Throws std::invalid_argument("layer <index> (<type>): <what>").
  [[noreturn]] void fail(const std::string& what) const;
  void set_out_shape(std::vector<int64_t> out);
  void add_param(const std::string& kind, std::vector<int64_t> shape,
                 float init_limit, bool sparse = false);

private:
  int index_;
  std::string type_;
  std::vector<int64_t> in_, out_;
  std::vector<param_spec> params_;
};

/// Layer `index` of a model, given its input shape per sample. Throws
/// std::invalid_argument naming the layer for an unknown type (listing the
/// known ones), a missing or invalid field, or an input it cannot take.
std::unique_ptr<layer> make_layer(int index, const layer_spec& spec,
                                  const std::vector<int64_t>& in_shape);

/// "[1, 28, 28]".
std::string shape_string(const std::vector<int64_t>& shape);

} // namespace af::gpu
