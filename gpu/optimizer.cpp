// Optimizers of the parameter-server shards: plain CPU loops over float
// arrays, with the update rules of TensorFlow's v1 optimizers (Keras uses
// the same ones). Declared in gpu/optimizer.hpp.
#include "actorflow/gpu/optimizer.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <type_traits>

namespace af::gpu {

namespace {

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

// "" or "<type>: <field> must be in <range>, got <value>".
std::string check_range(const std::string& type, const char* field, double x,
                        double lo, bool lo_open, double hi, bool hi_open) {
  bool ok = std::isfinite(x) && (lo_open ? x > lo : x >= lo)
            && (hi_open ? x < hi : x <= hi);
  if (ok)
    return {};
  std::string range =
    std::isinf(hi) ? std::string{lo_open ? "> " : ">= "} + number(lo)
                   : std::string{"in "} + (lo_open ? "(" : "[") + number(lo)
                       + ", " + number(hi) + (hi_open ? ")" : "]");
  return type + ": " + field + " must be " + range + ", got " + number(x);
}

// The scalars of one update.
struct coeffs {
  float lr = 0;
  float momentum = 0;
  bool nesterov = false;
  float beta1 = 0;
  float beta2 = 0;
  float epsilon = 0;
  float lr_t = 0; // adam: lr with the bias correction of this step
  float scale = 1; // every gradient is multiplied by it first
};

// One element. Slots are indexed only by the kinds that have them: sgd's
// are empty vectors whose data() may be null.
template <auto K>
inline void update(float& w, float g0, float* s1, float* s2, size_t i,
                   const coeffs& c) {
  using kind = decltype(K);
  float g = g0 * c.scale;
  if constexpr (K == kind::sgd) {
    w -= c.lr * g;
  } else if constexpr (K == kind::momentum) {
    float v = c.momentum * s1[i] + g;
    s1[i] = v;
    w -= c.nesterov ? c.lr * (g + c.momentum * v) : c.lr * v;
  } else if constexpr (K == kind::adam) {
    float m = c.beta1 * s1[i] + (1.0f - c.beta1) * g;
    float v = c.beta2 * s2[i] + (1.0f - c.beta2) * g * g;
    s1[i] = m;
    s2[i] = v;
    w -= c.lr_t * m / (std::sqrt(v) + c.epsilon);
  } else {
    float acc = s1[i] + g * g;
    s1[i] = acc;
    w -= c.lr * g / (std::sqrt(acc) + c.epsilon);
  }
}

// The dense update over a whole slice. The arrays never overlap; saying so
// (and -fno-math-errno for sqrt) lets the compiler vectorise the loop, and
// target_clones picks AVX-512 or AVX2 code at load time where the CPU has
// it (the shards' updates were 40% of a training run's CPU before).
template <auto K>
inline void dense_loop(float* __restrict__ w, const float* __restrict__ g,
                       float* __restrict__ s1, float* __restrict__ s2,
                       size_t n, const coeffs& c) {
  for (size_t i = 0; i < n; ++i)
    update<K>(w[i], g[i], s1, s2, i, c);
}

#define AF_DENSE_LOOP(k)                                                  \
  __attribute__((target_clones("avx512f", "avx2", "default"))) void         \
  dense_##k(float* __restrict__ w, const float* __restrict__ g,          \
               float* __restrict__ s1, float* __restrict__ s2, size_t n,    \
               const coeffs& c) {                                           \
    dense_loop<optimizer_state::kind::k>(w, g, s1, s2, n, c);                   \
  }
AF_DENSE_LOOP(sgd)
AF_DENSE_LOOP(momentum)
AF_DENSE_LOOP(adam)
AF_DENSE_LOOP(adagrad)
#undef AF_DENSE_LOOP

// Calls f with the kind as a compile-time constant, so that each loop is
// compiled once per optimizer without a branch per element.
template <class Kind, class F>
void visit(Kind k, F&& f) {
  switch (k) {
    case Kind::sgd:
      f(std::integral_constant<Kind, Kind::sgd>{});
      break;
    case Kind::momentum:
      f(std::integral_constant<Kind, Kind::momentum>{});
      break;
    case Kind::adam:
      f(std::integral_constant<Kind, Kind::adam>{});
      break;
    case Kind::adagrad:
      f(std::integral_constant<Kind, Kind::adagrad>{});
      break;
  }
}

coeffs coeffs_of(const optimizer_config& cfg, double lr, uint64_t step) {
  coeffs c;
  c.lr = static_cast<float>(lr);
  c.momentum = static_cast<float>(cfg.momentum);
  c.nesterov = cfg.nesterov;
  c.beta1 = static_cast<float>(cfg.beta1);
  c.beta2 = static_cast<float>(cfg.beta2);
  c.epsilon = static_cast<float>(cfg.epsilon);
  auto t = static_cast<double>(step);
  c.lr_t = static_cast<float>(lr * std::sqrt(1.0 - std::pow(cfg.beta2, t))
                              / (1.0 - std::pow(cfg.beta1, t)));
  return c;
}

} // namespace

std::string check(const optimizer_config& cfg) {
  const auto& t = cfg.type;
  if (t != "sgd" && t != "momentum" && t != "adam" && t != "adagrad")
    return "unknown optimizer \"" + t
           + "\" (known: sgd, momentum, adam, adagrad)";
  const double inf = HUGE_VAL;
  auto err =
    check_range(t, "learning_rate", cfg.learning_rate, 0, true, inf, false);
  if (err.empty() && t == "momentum")
    err = check_range(t, "momentum", cfg.momentum, 0, false, 1, true);
  if (err.empty() && t == "adam")
    err = check_range(t, "beta1", cfg.beta1, 0, false, 1, true);
  if (err.empty() && t == "adam")
    err = check_range(t, "beta2", cfg.beta2, 0, false, 1, true);
  if (err.empty() && t == "adam")
    err = check_range(t, "epsilon", cfg.epsilon, 0, true, inf, false);
  if (err.empty() && t == "adagrad")
    err = check_range(t, "epsilon", cfg.epsilon, 0, false, inf, false);
  if (err.empty() && t == "adagrad")
    err = check_range(t, "initial_accumulator", cfg.initial_accumulator, 0,
                      true, inf, false);
  if (err.empty())
    err = check_range(t, "decay_rate", cfg.decay_rate, 0, true, 1, false);
  if (err.empty() && cfg.decay_rate < 1)
    err = check_range(t, "decay_steps", cfg.decay_steps, 0, true, inf, false);
  return err;
}

double learning_rate_at(const optimizer_config& cfg, uint64_t step) {
  if (cfg.decay_rate >= 1 || cfg.decay_steps <= 0)
    return cfg.learning_rate;
  return cfg.learning_rate
         * std::pow(cfg.decay_rate,
                    static_cast<double>(step) / cfg.decay_steps);
}

optimizer_state::optimizer_state(const optimizer_config& cfg, size_t width,
                                 bool rows)
  : cfg_(cfg), rows_(rows), width_(width) {
  if (auto err = check(cfg); !err.empty())
    throw std::invalid_argument(err);
  if (cfg.type == "momentum")
    kind_ = kind::momentum;
  else if (cfg.type == "adam")
    kind_ = kind::adam;
  else if (cfg.type == "adagrad")
    kind_ = kind::adagrad;
}

optimizer_state optimizer_state::dense(const optimizer_config& cfg, size_t n) {
  optimizer_state s{cfg, n, false};
  s.grow(n);
  s.steps_.push_back(0);
  return s;
}

optimizer_state optimizer_state::rows(const optimizer_config& cfg,
                                      size_t width) {
  if (width == 0)
    throw std::invalid_argument("optimizer_state: rows of width 0");
  return optimizer_state{cfg, width, true};
}

void optimizer_state::grow(size_t elements) {
  size_ += elements;
  switch (kind_) {
    case kind::sgd:
      break;
    case kind::momentum:
      slot1_.resize(size_, 0.0f);
      break;
    case kind::adam:
      slot1_.resize(size_, 0.0f);
      slot2_.resize(size_, 0.0f);
      break;
    case kind::adagrad:
      slot1_.resize(size_, static_cast<float>(cfg_.initial_accumulator));
      break;
  }
}

size_t optimizer_state::add_rows(size_t k) {
  if (!rows_)
    throw std::logic_error("optimizer_state::add_rows on a dense slice");
  auto first = steps_.size();
  grow(k * width_);
  steps_.resize(first + k, 0);
  return first;
}

optimizer_state::arrays optimizer_state::snapshot() const {
  return arrays{slot1_, slot2_, steps_};
}

void optimizer_state::restore(arrays a) {
  auto rows = a.steps.size();
  if (rows_ ? rows > SIZE_MAX / width_ : rows != 1)
    throw std::invalid_argument(
      "optimizer state: " + std::to_string(rows) + " step counts for "
      + (rows_ ? "a table" : "a dense slice (needs 1)"));
  auto size = rows_ ? rows * width_ : size_;
  size_t slots = kind_ == kind::sgd ? 0 : kind_ == kind::adam ? 2 : 1;
  auto check_slot = [&](const std::vector<float>& slot, size_t i) {
    auto want = i <= slots ? size : 0;
    if (slot.size() != want)
      throw std::invalid_argument(
        "optimizer state: slot " + std::to_string(i) + " of " + cfg_.type
        + " has " + std::to_string(slot.size()) + " values, expected "
        + std::to_string(want));
  };
  check_slot(a.slot1, 1);
  check_slot(a.slot2, 2);
  size_ = size;
  slot1_ = std::move(a.slot1);
  slot2_ = std::move(a.slot2);
  steps_ = std::move(a.steps);
}

void optimizer_state::apply(float* values, const float* grads, size_t n,
                            double lr, float grad_scale) {
  if (rows_ || n != size_)
    throw std::invalid_argument("optimizer_state::apply: " + std::to_string(n)
                                + " gradients for a dense slice of "
                                + std::to_string(rows_ ? 0 : size_));
  auto c = coeffs_of(cfg_, lr, ++steps_[0]);
  c.scale = grad_scale;
  auto* s1 = slot1_.data();
  auto* s2 = slot2_.data();
  switch (kind_) {
    case kind::sgd:
      dense_sgd(values, grads, s1, s2, n, c);
      break;
    case kind::momentum:
      dense_momentum(values, grads, s1, s2, n, c);
      break;
    case kind::adam:
      dense_adam(values, grads, s1, s2, n, c);
      break;
    case kind::adagrad:
      dense_adagrad(values, grads, s1, s2, n, c);
      break;
  }
}

void optimizer_state::apply_at(float* values, const uint64_t* index,
                               const float* grads, size_t k, double lr) {
  if (rows_)
    throw std::invalid_argument("optimizer_state::apply_at on a table");
  for (size_t j = 0; j < k; ++j)
    if (index[j] >= size_)
      throw std::invalid_argument(
        "optimizer_state::apply_at: element " + std::to_string(index[j])
        + " outside a slice of " + std::to_string(size_));
  auto c = coeffs_of(cfg_, lr, ++steps_[0]);
  float* s1 = slot1_.data();
  float* s2 = slot2_.data();
  visit(kind_, [&](auto kd) {
    for (size_t j = 0; j < k; ++j) {
      auto i = static_cast<size_t>(index[j]);
      update<decltype(kd)::value>(values[i], grads[j], s1, s2, i, c);
    }
  });
}

void optimizer_state::apply_rows(float* table, const size_t* rows,
                                 const float* grads, size_t r, double lr) {
  if (!rows_)
    throw std::invalid_argument("optimizer_state::apply_rows on a dense "
                                "slice");
  for (size_t j = 0; j < r; ++j)
    if (rows[j] >= steps_.size())
      throw std::invalid_argument(
        "optimizer_state::apply_rows: row position " + std::to_string(rows[j])
        + " outside a table of " + std::to_string(steps_.size()) + " rows");
  float* s1 = slot1_.data();
  float* s2 = slot2_.data();
  auto d = width_;
  visit(kind_, [&](auto kd) {
    for (size_t j = 0; j < r; ++j) {
      auto row = rows[j];
      auto c = coeffs_of(cfg_, lr, ++steps_[row]);
      auto base = row * d;
      const float* g = grads + j * d;
      for (size_t e = 0; e < d; ++e)
        update<decltype(kd)::value>(table[base + e], g[e], s1, s2, base + e, c);
    }
  });
}

} // namespace af::gpu
