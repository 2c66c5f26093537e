// Layers: one class per layer type of the topology (gpu/model.hpp's
// layer_spec), each built only from device primitives (gpu/device.hpp), so
// the same code runs on the CPU and the CUDA device. Declared in
// gpu/layers.hpp.
#include "actorflow/gpu/layers.hpp"

#include <climits>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "actorflow/runtime/core/random.hpp"

namespace af::gpu {

namespace {

int64_t product(const std::vector<int64_t>& shape) noexcept {
  int64_t n = 1;
  for (auto d : shape)
    n *= d;
  return n;
}

float glorot_limit(int64_t fan_in, int64_t fan_out) {
  return static_cast<float>(
    std::sqrt(6.0 / static_cast<double>(fan_in + fan_out)));
}

} // namespace

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0)
      s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// --- layer -----------------------------------------------------------

layer::layer(int index, std::string type, std::vector<int64_t> in)
  : index_(index), type_(std::move(type)), in_(std::move(in)) {
}

layer::~layer() = default;

int64_t layer::in_size() const noexcept {
  return product(in_);
}

int64_t layer::out_size() const noexcept {
  return product(out_);
}

void layer::fail(const std::string& what) const {
  throw std::invalid_argument("layer " + std::to_string(index_) + " (" + type_
                              + "): " + what);
}

void layer::set_out_shape(std::vector<int64_t> out) {
  // Device calls take per-sample sizes as int.
  if (product(out) > INT_MAX)
    fail("output " + shape_string(out)
         + " has more than 2^31-1 values per sample");
  out_ = std::move(out);
}

void layer::add_param(const std::string& kind, std::vector<int64_t> shape,
                      float init_limit, bool sparse) {
  param_spec p;
  p.name = std::to_string(index_) + "_" + type_ + "/" + kind;
  p.shape = std::move(shape);
  p.sparse = sparse;
  p.init_limit = init_limit;
  params_.push_back(std::move(p));
}

namespace {

// --- dense -----------------------------------------------------------

// y = x W + b, W [in, units], x flattened to [n, in].
class dense_layer final : public layer {
public:
  dense_layer(int index, const layer_spec& spec, std::vector<int64_t> in)
    : layer(index, "dense", std::move(in)) {
    if (spec.units <= 0)
      fail("units must be > 0 (got " + std::to_string(spec.units) + ")");
    fan_in_ = in_size();
    if (fan_in_ > INT_MAX)
      fail("input " + shape_string(in_shape()) + " is too large");
    fan_out_ = spec.units;
    set_out_shape({fan_out_});
    add_param("kernel", {fan_in_, fan_out_}, glorot_limit(fan_in_, fan_out_));
    add_param("bias", {fan_out_}, 0);
  }

  void forward(const pass& p, const void* x, float* y,
               std::span<const param_ref> params) override {
    auto in = static_cast<int>(fan_in_);
    auto out = static_cast<int>(fan_out_);
    p.dev.gemm(false, false, p.n, out, in, 1.0f, static_cast<const float*>(x),
               params[0].value, 0.0f, y);
    p.dev.add_bias(y, params[1].value, p.n, out);
  }

  void backward(const pass& p, const void* x, const float*, const float* dy,
                float* dx, std::span<const param_ref> params) override {
    auto in = static_cast<int>(fan_in_);
    auto out = static_cast<int>(fan_out_);
    // dW = x^T dy, db = column sums of dy, dx = dy W^T.
    p.dev.gemm(true, false, in, out, p.n, 1.0f, static_cast<const float*>(x),
               dy, 0.0f, params[0].grad);
    p.dev.fill(params[1].grad, static_cast<size_t>(out), 0.0f);
    p.dev.bias_grad(dy, params[1].grad, p.n, out);
    if (dx != nullptr)
      p.dev.gemm(false, true, p.n, in, out, 1.0f, dy, params[0].value, 0.0f,
                 dx);
  }

private:
  int64_t fan_in_ = 0, fan_out_ = 0;
};

// --- relu ------------------------------------------------------------

class relu_layer final : public layer {
public:
  relu_layer(int index, std::vector<int64_t> in)
    : layer(index, "relu", std::move(in)) {
    set_out_shape(in_shape());
  }

  void forward(const pass& p, const void* x, float* y,
               std::span<const param_ref>) override {
    p.dev.relu_forward(static_cast<const float*>(x), y, count(p));
  }

  void backward(const pass& p, const void*, const float* y, const float* dy,
                float* dx, std::span<const param_ref>) override {
    if (dx != nullptr)
      p.dev.relu_backward(y, dy, dx, count(p));
  }

private:
  size_t count(const pass& p) const noexcept {
    return static_cast<size_t>(p.n) * static_cast<size_t>(out_size());
  }
};

// --- conv2d ----------------------------------------------------------

class conv2d_layer final : public layer {
public:
  conv2d_layer(int index, const layer_spec& spec, std::vector<int64_t> in)
    : layer(index, "conv2d", std::move(in)) {
    const auto& x = in_shape();
    if (x.size() != 3)
      fail("needs a [channels, height, width] input, got " + shape_string(x));
    if (spec.filters <= 0)
      fail("filters must be > 0 (got " + std::to_string(spec.filters) + ")");
    if (spec.kernel <= 0)
      fail("kernel must be > 0 (got " + std::to_string(spec.kernel) + ")");
    if (spec.stride <= 0)
      fail("stride must be > 0 (got " + std::to_string(spec.stride) + ")");
    if (spec.padding < 0)
      fail("padding must be >= 0 (got " + std::to_string(spec.padding) + ")");
    if (spec.kernel > x[1] + 2 * spec.padding
        || spec.kernel > x[2] + 2 * spec.padding)
      fail("kernel " + std::to_string(spec.kernel) + " with padding "
           + std::to_string(spec.padding) + " does not fit the input "
           + shape_string(x));
    if (spec.filters > INT_MAX || spec.kernel > INT_MAX || spec.stride > INT_MAX
        || spec.padding > INT_MAX)
      fail("a field is larger than 2^31-1");
    shape_.c = static_cast<int>(x[0]);
    shape_.h = static_cast<int>(x[1]);
    shape_.w = static_cast<int>(x[2]);
    shape_.k = static_cast<int>(spec.filters);
    shape_.r = shape_.s = static_cast<int>(spec.kernel);
    shape_.stride = static_cast<int>(spec.stride);
    shape_.pad = static_cast<int>(spec.padding);
    set_out_shape({spec.filters, shape_.out_h(), shape_.out_w()});
    int64_t area = spec.kernel * spec.kernel;
    add_param("kernel", {spec.filters, x[0], spec.kernel, spec.kernel},
              glorot_limit(x[0] * area, spec.filters * area));
    add_param("bias", {spec.filters}, 0);
  }

  void forward(const pass& p, const void* x, float* y,
               std::span<const param_ref> params) override {
    p.dev.conv2d_forward(batch(p), static_cast<const float*>(x),
                         params[0].value, params[1].value, y);
  }

  void backward(const pass& p, const void* x, const float*, const float* dy,
                float* dx, std::span<const param_ref> params) override {
    p.dev.conv2d_backward(batch(p), static_cast<const float*>(x),
                          params[0].value, dy, dx, params[0].grad,
                          params[1].grad);
  }

private:
  conv2d_shape batch(const pass& p) const noexcept {
    conv2d_shape s = shape_;
    s.n = p.n;
    return s;
  }

  conv2d_shape shape_;
};

// --- maxpool2d -------------------------------------------------------

class maxpool2d_layer final : public layer {
public:
  maxpool2d_layer(int index, const layer_spec& spec, std::vector<int64_t> in)
    : layer(index, "maxpool2d", std::move(in)) {
    const auto& x = in_shape();
    if (x.size() != 3)
      fail("needs a [channels, height, width] input, got " + shape_string(x));
    if (spec.pool <= 0)
      fail("pool must be > 0 (got " + std::to_string(spec.pool) + ")");
    if (spec.pool_stride < 0)
      fail("pool_stride must be >= 0 (got " + std::to_string(spec.pool_stride)
           + ")");
    if (spec.pool > x[1] || spec.pool > x[2])
      fail("pool " + std::to_string(spec.pool) + " is larger than the input "
           + shape_string(x));
    int64_t stride = spec.pool_stride == 0 ? spec.pool : spec.pool_stride;
    if (stride > INT_MAX)
      fail("pool_stride is larger than 2^31-1");
    shape_.c = static_cast<int>(x[0]);
    shape_.h = static_cast<int>(x[1]);
    shape_.w = static_cast<int>(x[2]);
    shape_.window = static_cast<int>(spec.pool);
    shape_.stride = static_cast<int>(stride);
    set_out_shape({x[0], shape_.out_h(), shape_.out_w()});
  }

  void forward(const pass& p, const void* x, float* y,
               std::span<const param_ref>) override {
    p.dev.maxpool_forward(batch(p), static_cast<const float*>(x), y);
  }

  void backward(const pass& p, const void* x, const float* y, const float* dy,
                float* dx, std::span<const param_ref>) override {
    if (dx != nullptr)
      p.dev.maxpool_backward(batch(p), static_cast<const float*>(x), y, dy, dx);
  }

private:
  pool_shape batch(const pass& p) const noexcept {
    pool_shape s = shape_;
    s.n = p.n;
    return s;
  }

  pool_shape shape_;
};

// --- flatten ---------------------------------------------------------

class flatten_layer final : public layer {
public:
  flatten_layer(int index, std::vector<int64_t> in)
    : layer(index, "flatten", std::move(in)) {
    set_out_shape({in_size()});
  }

  bool aliases_input() const noexcept override { return true; }

  // Reached only when a caller ignores aliases_input(); copying keeps
  // the layer correct on its own.
  void forward(const pass& p, const void* x, float* y,
               std::span<const param_ref>) override {
    p.dev.copy(y, x, bytes(p));
  }

  void backward(const pass& p, const void*, const float*, const float* dy,
                float* dx, std::span<const param_ref>) override {
    if (dx != nullptr)
      p.dev.copy(dx, dy, bytes(p));
  }

private:
  size_t bytes(const pass& p) const noexcept {
    return static_cast<size_t>(p.n) * static_cast<size_t>(out_size())
           * sizeof(float);
  }
};

// --- dropout ---------------------------------------------------------

class dropout_layer final : public layer {
public:
  dropout_layer(int index, const layer_spec& spec, std::vector<int64_t> in)
    : layer(index, "dropout", std::move(in)) {
    if (!(spec.rate >= 0 && spec.rate < 1))
      fail("rate must be in [0, 1) (got " + std::to_string(spec.rate) + ")");
    rate_ = static_cast<float>(spec.rate);
    set_out_shape(in_shape());
  }

  void forward(const pass& p, const void* x, float* y,
               std::span<const param_ref>) override {
    size_t n = count(p);
    if (!p.training) {
      p.dev.copy(y, x, n * sizeof(float));
      masked_ = false;
      return;
    }
    mask_.reserve(p.dev, n * sizeof(float));
    uint64_t seed = mix64(p.seed ^ mix64(static_cast<uint64_t>(index())));
    p.dev.dropout_forward(rate_, seed, static_cast<const float*>(x),
                          mask_.f32(), y, n);
    masked_ = true;
  }

  void backward(const pass& p, const void*, const float*, const float* dy,
                float* dx, std::span<const param_ref>) override {
    if (dx == nullptr)
      return;
    if (masked_)
      p.dev.mul(dy, mask_.f32(), dx, count(p));
    else
      p.dev.copy(dx, dy, count(p) * sizeof(float));
  }

private:
  size_t count(const pass& p) const noexcept {
    return static_cast<size_t>(p.n) * static_cast<size_t>(out_size());
  }

  float rate_ = 0;
  darray mask_;
  bool masked_ = false; // whether the last forward drew a mask
};

// --- embedding -------------------------------------------------------

class embedding_layer final : public layer {
public:
  embedding_layer(int index, const layer_spec& spec, std::vector<int64_t> in)
    : layer(index, "embedding", std::move(in)) {
    if (index != 0)
      fail("must be the first layer (it takes the ids of the input)");
    if (in_shape().size() != 1)
      fail("needs an input of F ids per sample ([F]), got "
           + shape_string(in_shape()));
    if (spec.rows <= 0)
      fail("rows must be > 0 (got " + std::to_string(spec.rows) + ")");
    if (spec.dim <= 0)
      fail("dim must be > 0 (got " + std::to_string(spec.dim) + ")");
    if (spec.dim > INT_MAX)
      fail("dim is larger than 2^31-1");
    dim_ = static_cast<int>(spec.dim);
    set_out_shape({in_shape()[0], spec.dim});
    add_param("table", {spec.rows, spec.dim}, 0.05f, /*sparse=*/true);
  }

  bool takes_ids() const noexcept override { return true; }

  void forward(const pass& p, const void* x, float* y,
               std::span<const param_ref> params) override {
    p.dev.gather_rows(params[0].value, static_cast<const int32_t*>(x), y,
                      ids(p), dim_);
  }

  void backward(const pass& p, const void* x, const float*, const float* dy,
                float*, std::span<const param_ref> params) override {
    p.dev.fill(params[0].grad, static_cast<size_t>(params[0].size), 0.0f);
    p.dev.scatter_add_rows(dy, static_cast<const int32_t*>(x), params[0].grad,
                           ids(p), dim_);
  }

private:
  int ids(const pass& p) const noexcept {
    return p.n * static_cast<int>(in_shape()[0]);
  }

  int dim_ = 0;
};

// --- features --------------------------------------------------------

class features_layer final : public layer {
public:
  features_layer(int index, const layer_spec& spec, std::vector<int64_t> in)
    : layer(index, "features", std::move(in)) {
    if (index != 0)
      fail("must be the first layer (it takes the model's inputs)");
    if (in_shape().size() != 1)
      fail("needs an input of F ids and D floats per sample ([F + D]), got "
           + shape_string(in_shape()));
    if (spec.ids <= 0 || spec.ids > in_shape()[0])
      fail("ids must be in [1, " + std::to_string(in_shape()[0]) + "] (got "
           + std::to_string(spec.ids) + ")");
    if (spec.rows <= 0)
      fail("rows must be > 0 (got " + std::to_string(spec.rows) + ")");
    if (spec.dim <= 0 || spec.dim > INT_MAX / spec.ids)
      fail("dim must be in [1, 2^31 / ids) (got " + std::to_string(spec.dim)
           + ")");
    ids_ = static_cast<int>(spec.ids);
    floats_ = static_cast<int>(in_shape()[0] - spec.ids);
    dim_ = static_cast<int>(spec.dim);
    set_out_shape({spec.ids * spec.dim + floats_});
    add_param("table", {spec.rows, spec.dim}, 0.05f, /*sparse=*/true);
  }

  bool takes_ids() const noexcept override { return true; }

  void forward(const pass& p, const void* x, float* y,
               std::span<const param_ref> params) override {
    auto* idx = static_cast<const int32_t*>(x);
    if (floats_ == 0) {
      p.dev.gather_rows(params[0].value, idx, y, p.n * ids_, dim_);
      return;
    }
    auto* rows = staging(p);
    p.dev.gather_rows(params[0].value, idx, rows, p.n * ids_, dim_);
    int e = ids_ * dim_, w = e + floats_;
    p.dev.copy_columns(y, w, rows, e, p.n, e);
    p.dev.copy_columns(y + e, w, dense_part(p, x), floats_, p.n, floats_);
  }

  void backward(const pass& p, const void* x, const float*, const float* dy,
                float*, std::span<const param_ref> params) override {
    auto* idx = static_cast<const int32_t*>(x);
    const float* drows = dy;
    if (floats_ > 0) {
      auto* rows = staging(p);
      int e = ids_ * dim_;
      p.dev.copy_columns(rows, e, dy, e + floats_, p.n, e);
      drows = rows;
    }
    p.dev.fill(params[0].grad, static_cast<size_t>(params[0].size), 0.0f);
    p.dev.scatter_add_rows(drows, idx, params[0].grad, p.n * ids_, dim_);
  }

private:
  // The floats follow the n * F ids.
  const float* dense_part(const pass& p, const void* x) const noexcept {
    return reinterpret_cast<const float*>(static_cast<const int32_t*>(x)
                                          + static_cast<size_t>(p.n) * ids_);
  }

  // [n, F * dim] for the gathered rows (or their gradient).
  float* staging(const pass& p) {
    rows_.reserve(p.dev,
                  static_cast<size_t>(p.n) * ids_ * dim_ * sizeof(float));
    return rows_.f32();
  }

  int ids_ = 0, floats_ = 0, dim_ = 0;
  darray rows_;
};

} // namespace

std::unique_ptr<layer> make_layer(int index, const layer_spec& spec,
                                  const std::vector<int64_t>& in_shape) {
  const auto& t = spec.type;
  if (t == "dense")
    return std::make_unique<dense_layer>(index, spec, in_shape);
  if (t == "relu")
    return std::make_unique<relu_layer>(index, in_shape);
  if (t == "conv2d")
    return std::make_unique<conv2d_layer>(index, spec, in_shape);
  if (t == "maxpool2d")
    return std::make_unique<maxpool2d_layer>(index, spec, in_shape);
  if (t == "flatten")
    return std::make_unique<flatten_layer>(index, in_shape);
  if (t == "dropout")
    return std::make_unique<dropout_layer>(index, spec, in_shape);
  if (t == "embedding")
    return std::make_unique<embedding_layer>(index, spec, in_shape);
  if (t == "features")
    return std::make_unique<features_layer>(index, spec, in_shape);
  throw std::invalid_argument("layer " + std::to_string(index) + " (" + t
                              + "): unknown layer type; known types: "
                              + known_layer_types);
}

} // namespace af::gpu
