// A model: layers built and checked from the spec, activation and gradient
// buffers sized for the largest batch seen so far, and the loss.
#include "actorflow/gpu/model.hpp"

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <utility>

#include "actorflow/gpu/layers.hpp"

namespace af::gpu {

namespace {

constexpr const char* softmax_loss = "softmax_cross_entropy";
constexpr const char* sigmoid_loss = "sigmoid_binary_cross_entropy";

struct built_model {
  std::vector<std::unique_ptr<layer>> layers;
  std::vector<param_spec> params;
  /// Index in `params` of each layer's first parameter.
  std::vector<size_t> first_param;
};

built_model build(const model_spec& spec) {
  if (spec.input_shape.empty())
    throw std::invalid_argument("model input_shape is empty");
  int64_t in_size = 1;
  for (auto d : spec.input_shape) {
    if (d <= 0)
      throw std::invalid_argument("model input_shape "
                                  + shape_string(spec.input_shape)
                                  + " has a dimension <= 0");
    in_size *= d;
    if (in_size > INT_MAX)
      throw std::invalid_argument("model input_shape "
                                  + shape_string(spec.input_shape)
                                  + " has more than 2^31-1 values");
  }
  if (spec.layers.empty())
    throw std::invalid_argument("model has no layers");
  bool softmax = spec.loss == softmax_loss;
  if (!softmax && spec.loss != sigmoid_loss)
    throw std::invalid_argument("model loss \"" + spec.loss
                                + "\" is unknown; known losses: " + softmax_loss
                                + ", " + sigmoid_loss);

  built_model m;
  std::vector<int64_t> shape = spec.input_shape;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    auto l = make_layer(static_cast<int>(i), spec.layers[i], shape);
    m.first_param.push_back(m.params.size());
    for (const auto& p : l->params())
      m.params.push_back(p);
    shape = l->out_shape();
    m.layers.push_back(std::move(l));
  }

  const auto& last = *m.layers.back();
  int64_t width = last.out_size();
  auto fail_last = [&](const std::string& what) {
    throw std::invalid_argument("layer " + std::to_string(last.index()) + " ("
                                + last.type() + "): " + what);
  };
  if (softmax && width < 2)
    fail_last("the last layer has width " + std::to_string(width) + "; "
              + softmax_loss + " needs at least 2 classes");
  if (!softmax && width != 1)
    fail_last("the last layer has width " + std::to_string(width) + "; "
              + sigmoid_loss + " needs 1");
  return m;
}

} // namespace

std::vector<param_spec> param_specs(const model_spec& spec) {
  return build(spec).params;
}

int64_t output_width(const model_spec& spec) {
  return build(spec).layers.back()->out_size();
}

// --- model -----------------------------------------------------------

struct model::impl {
  model_spec spec;
  device& dev;
  std::vector<std::unique_ptr<layer>> layers;
  std::vector<param_spec> params;
  std::vector<size_t> first_param;
  bool softmax = false;
  int width = 0; // outputs per sample of the last layer

  std::vector<darray> values, grads;
  /// Floats that values[i] and grads[i] hold now (sparse: local rows * dim).
  std::vector<int64_t> held;

  /// need_dx[i]: some layer below i has parameters, so layer i's backward
  /// must produce its input gradient.
  std::vector<bool> need_dx;
  /// outs[i]: output of layer i (empty where the layer aliases its input).
  /// douts[i]: gradient of that output, where it is a buffer of its own.
  std::vector<darray> outs, douts;
  darray losses;    // [n]
  int capacity = 0; // samples the buffers hold

  // Per-call views, kept to avoid allocating every step.
  std::vector<const void*> act; // act[i]: output of layer i
  std::vector<float*> dact;     // dact[i]: gradient of act[i]
  std::vector<param_ref> refs;  // refs[j]: parameter j
  std::vector<float> host_losses, host_logits, host_float_labels;
  std::vector<int32_t> host_int_labels;

  impl(model_spec s, device& d) : spec(std::move(s)), dev(d) {
    auto m = build(spec);
    layers = std::move(m.layers);
    params = std::move(m.params);
    first_param = std::move(m.first_param);
    softmax = spec.loss == softmax_loss;
    width = static_cast<int>(layers.back()->out_size());

    for (const auto& p : params) {
      int64_t floats = p.sparse ? 0 : p.size();
      auto bytes = static_cast<size_t>(floats) * sizeof(float);
      values.emplace_back(dev, bytes);
      grads.emplace_back(dev, bytes);
      if (floats > 0) {
        // The trainer uploads values before the first step; zeros keep a
        // forgotten upload from reading garbage.
        dev.fill(values.back().f32(), static_cast<size_t>(floats), 0.0f);
        dev.fill(grads.back().f32(), static_cast<size_t>(floats), 0.0f);
      }
      held.push_back(floats);
    }

    bool params_below = false;
    for (const auto& l : layers) {
      need_dx.push_back(params_below);
      params_below = params_below || !l->params().empty();
    }
    outs.resize(layers.size());
    douts.resize(layers.size());
    act.resize(layers.size());
    dact.resize(layers.size());
    refs.resize(params.size());
  }

  // Grows the buffers to hold n samples and points dact at them.
  void ensure_batch(int n) {
    if (n <= capacity)
      return;
    size_t L = layers.size();
    for (size_t i = 0; i < L; ++i) {
      auto bytes = static_cast<size_t>(n)
                   * static_cast<size_t>(layers[i]->out_size()) * sizeof(float);
      if (!layers[i]->aliases_input())
        outs[i].reserve(dev, bytes);
      bool own_grad =
        i + 1 == L || (!layers[i + 1]->aliases_input() && need_dx[i + 1]);
      if (own_grad)
        douts[i].reserve(dev, bytes);
    }
    losses.reserve(dev, static_cast<size_t>(n) * sizeof(float));
    for (size_t i = L; i-- > 0;) {
      bool shared = i + 1 < L && layers[i + 1]->aliases_input();
      dact[i] = shared ? dact[i + 1] : douts[i].f32();
    }
    capacity = n;
  }

  std::span<const param_ref> layer_params(size_t i) const {
    return {refs.data() + first_param[i], layers[i]->params().size()};
  }

  void forward(const void* x, int n, bool training, uint64_t seed) {
    for (size_t j = 0; j < params.size(); ++j)
      refs[j] = {values[j].f32(), grads[j].f32(), held[j]};
    pass p{dev, n, training, seed};
    const void* in = x;
    for (size_t i = 0; i < layers.size(); ++i) {
      if (layers[i]->aliases_input()) {
        act[i] = in;
      } else {
        layers[i]->forward(p, in, outs[i].f32(), layer_params(i));
        act[i] = outs[i].get();
      }
      in = act[i];
    }
  }

  // The loss per sample into `losses` and its gradient (scale 1, so the
  // parameter gradients are sums over the batch) into dact.back().
  void loss(const void* labels, int n) {
    auto logits = static_cast<const float*>(act.back());
    if (softmax)
      dev.softmax_xent(logits, static_cast<const int32_t*>(labels), n, width,
                       losses.f32(), dact.back(), 1.0f);
    else
      dev.sigmoid_bce(logits, static_cast<const float*>(labels), n,
                      losses.f32(), dact.back(), 1.0f);
  }

  void backward(const void* x, int n) {
    pass p{dev, n, true, 0};
    for (size_t i = layers.size(); i-- > 0;) {
      auto& l = *layers[i];
      if (l.aliases_input() || (l.params().empty() && !need_dx[i]))
        continue;
      const void* in = i == 0 ? x : act[i - 1];
      float* dx = need_dx[i] ? dact[i - 1] : nullptr;
      l.backward(p, in, static_cast<const float*>(act[i]), dact[i], dx,
                 layer_params(i));
    }
  }

  // Downloads (a sync point) the losses, logits and labels and counts.
  step_result tally(const void* labels, int n, std::vector<float>* logits) {
    auto count = static_cast<size_t>(n);
    host_losses.resize(count);
    dev.download(host_losses.data(), losses.get(), count * sizeof(float));
    host_logits.resize(count * static_cast<size_t>(width));
    dev.download(host_logits.data(), act.back(),
                 host_logits.size() * sizeof(float));
    step_result r;
    for (float l : host_losses)
      r.loss_sum += l;
    if (softmax) {
      host_int_labels.resize(count);
      dev.download(host_int_labels.data(), labels, count * sizeof(int32_t));
      for (size_t i = 0; i < count; ++i) {
        const float* row = host_logits.data() + i * static_cast<size_t>(width);
        auto best = std::max_element(row, row + width) - row;
        r.correct += best == host_int_labels[i] ? 1 : 0;
      }
    } else {
      host_float_labels.resize(count);
      dev.download(host_float_labels.data(), labels, count * sizeof(float));
      for (size_t i = 0; i < count; ++i) {
        bool positive = host_logits[i] > 0; // sigmoid > 0.5
        r.correct += positive == (host_float_labels[i] > 0.5f) ? 1 : 0;
      }
    }
    if (logits != nullptr)
      *logits = host_logits;
    return r;
  }

  void zero_grads() {
    for (size_t j = 0; j < params.size(); ++j)
      if (held[j] > 0)
        dev.fill(grads[j].f32(), static_cast<size_t>(held[j]), 0.0f);
  }
};

model::model(model_spec spec, device& dev)
  : impl_(std::make_unique<impl>(std::move(spec), dev)) {
}

model::~model() = default;

const model_spec& model::spec() const noexcept {
  return impl_->spec;
}

const std::vector<param_spec>& model::params() const noexcept {
  return impl_->params;
}

device& model::dev() noexcept {
  return impl_->dev;
}

darray& model::value(size_t i) {
  return impl_->values.at(i);
}

darray& model::grad(size_t i) {
  return impl_->grads.at(i);
}

void model::set_local_rows(size_t i, int64_t rows) {
  auto& m = *impl_;
  const auto& p = m.params.at(i);
  if (!p.sparse)
    throw std::invalid_argument("set_local_rows: parameter " + p.name
                                + " is not sparse");
  if (rows < 0)
    throw std::invalid_argument("set_local_rows: " + p.name + ": rows < 0");
  int64_t floats = rows * p.row_size();
  auto bytes = static_cast<size_t>(floats) * sizeof(float);
  m.values[i].reserve(m.dev, bytes);
  m.grads[i].reserve(m.dev, bytes);
  m.held[i] = floats;
}

model::step_result model::train_step(const void* x, const void* labels, int n,
                                     uint64_t seed) {
  auto& m = *impl_;
  if (n < 0)
    throw std::invalid_argument("train_step: n < 0");
  if (n == 0) {
    m.zero_grads();
    return {};
  }
  m.ensure_batch(n);
  m.forward(x, n, true, seed);
  m.loss(labels, n);
  m.backward(x, n);
  return m.tally(labels, n, nullptr);
}

model::step_result model::evaluate(const void* x, const void* labels, int n,
                                   std::vector<float>* logits) {
  auto& m = *impl_;
  if (n < 0)
    throw std::invalid_argument("evaluate: n < 0");
  if (n == 0) {
    if (logits != nullptr)
      logits->clear();
    return {};
  }
  m.ensure_batch(n);
  m.forward(x, n, false, 0);
  m.loss(labels, n);
  return m.tally(labels, n, logits);
}

} // namespace af::gpu
