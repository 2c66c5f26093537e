// Optimizers of the parameter-server shards: plain CPU loops over float
// arrays, with the update rules of TensorFlow's v1 optimizers (Keras uses
// the same ones):
//
//   sgd       w -= lr * g
//   momentum  v = momentum * v + g;  w -= lr * v
//             nesterov: w -= lr * (g + momentum * v)   (v already updated)
//   adam      t += 1;  lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)
//             m = beta1 * m + (1 - beta1) * g
//             v = beta2 * v + (1 - beta2) * g^2
//             w -= lr_t * m / (sqrt(v) + epsilon)
//   adagrad   acc += g^2  (acc starts at initial_accumulator)
//             w -= lr * g / (sqrt(acc) + epsilon)
//
// Sparse updates are lazy: only the elements or rows a gradient touches
// change, values and optimizer state alike (no momentum decay of untouched
// elements). For Adam this is TensorFlow's "lazy Adam", except that the step
// count t, and with it the bias correction, is kept per row of a sparse
// table: a row updated for the first time is corrected as at t = 1,
// however many updates other rows have had. A dense slice has one step count
// for the whole slice, advanced by every update of the slice, whether it
// touches every element (apply) or some (apply_at, top-k gradients).
//
// Nothing here knows about CAF or devices.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace af::gpu {

/// Mirrors topology.Optimizer. The defaults here are the fields' own;
/// whoever builds a config from a topology applies the per-type defaults
/// the schema documents: learning_rate 0.001 for adam, epsilon 1e-10 for
/// adagrad.
struct optimizer_config {
  /// "sgd", "momentum", "adam" or "adagrad".
  std::string type = "sgd";
  /// > 0. 0.01 for sgd, momentum and adagrad (adam: 0.001, see above).
  double learning_rate = 0.01;
  /// momentum: the decay of the velocity, in [0, 1).
  double momentum = 0.9;
  /// momentum: Nesterov's variant.
  bool nesterov = false;
  /// adam: decay of the first and second moments, each in [0, 1).
  double beta1 = 0.9;
  double beta2 = 0.999;
  /// adam (> 0, default 1e-7) and adagrad (>= 0; 1e-10 from a topology):
  /// added to the denominator.
  double epsilon = 1e-7;
  /// adagrad: the accumulators' starting value, > 0.
  double initial_accumulator = 0.1;
  /// Exponential decay of the learning rate, as TensorFlow's
  /// ExponentialDecay (not staircase): learning_rate * decay_rate ^
  /// (step / decay_steps), step = updates the shard applied before.
  /// decay_rate in (0, 1], 1 = constant; decay_steps > 0 when it is < 1.
  double decay_rate = 1.0;
  double decay_steps = 0;
};

/// The learning rate of update `step` (0-based) under cfg's decay.
double learning_rate_at(const optimizer_config& cfg, uint64_t step);

/// "" when `cfg` is usable, otherwise one line saying what is wrong, e.g.
/// `unknown optimizer "adamw" (known: sgd, momentum, adam, adagrad)` or
/// `adam: beta2 must be in [0, 1), got 1`. Only the fields `cfg.type` uses
/// are checked.
std::string check(const optimizer_config& cfg);

/// The optimizer's memory for one block of parameters: a dense slice of n
/// elements, or a sparse table of rows of `width` floats that grows as rows
/// are materialised. The parameter values themselves stay with the caller;
/// every apply takes them as a pointer and updates them in place.
///
/// Held per element: momentum's velocity; Adam's m and v; Adagrad's
/// accumulator (sgd holds nothing). Held per dense slice, or per row of a
/// table: the number of updates applied (Adam's t).
class optimizer_state {
public:
  /// A dense slice of `n` elements. Throws std::invalid_argument when
  /// check(cfg) fails.
  static optimizer_state dense(const optimizer_config& cfg, size_t n);

  /// A table of rows of `width` floats, with no rows yet. Throws
  /// std::invalid_argument when check(cfg) fails or width is 0.
  static optimizer_state rows(const optimizer_config& cfg, size_t width);

  const optimizer_config& config() const noexcept { return cfg_; }

  /// Elements covered (rows: row_count() * width()).
  size_t size() const noexcept { return size_; }
  /// Rows: floats per row. Dense: size().
  size_t width() const noexcept { return width_; }
  /// Rows: rows added so far. Dense: 1.
  size_t row_count() const noexcept { return steps_.size(); }
  /// Updates applied to row `row` (dense: to the slice, row 0).
  uint64_t steps(size_t row = 0) const noexcept { return steps_[row]; }

  /// Rows only: appends `k` fresh rows (no updates yet) and returns the
  /// position of the first; the caller's table grows alongside.
  size_t add_rows(size_t k);

  /// Dense only: every element, values[i] updated with
  /// grads[i] * grad_scale for i < n; n must equal size(). (The scale saves
  /// the shards a pass dividing a gradient sum by its samples.)
  void apply(float* values, const float* grads, size_t n, double lr,
             float grad_scale = 1.0f);

  /// Dense only: elements index[j] (each < size(), all distinct: sum
  /// duplicates first) updated with grads[j] for j < k; every other
  /// element and its state stays as it was. `values` is the whole slice.
  void apply_at(float* values, const uint64_t* index, const float* grads,
                size_t k, double lr);

  /// Rows only: row rows[j] (a position < row_count(), all distinct) of
  /// `table` ([row_count(), width()], row-major) updated with
  /// grads[j * width() .. (j + 1) * width()) for j < r. Rows not named are
  /// untouched, state included.
  void apply_rows(float* table, const size_t* rows, const float* grads,
                  size_t r, double lr);

  /// The state as plain arrays, for checkpoints (actors/ps_shard/ps_shard.cpp
  /// stores them): slot1 is momentum's velocity, Adam's m or Adagrad's
  /// accumulator, slot2 Adam's v, each size() floats or empty where the
  /// optimizer has no such slot; steps holds steps(row) for every row
  /// (dense: one).
  struct arrays {
    std::vector<float> slot1;
    std::vector<float> slot2;
    std::vector<uint64_t> steps;
  };
  arrays snapshot() const;

  /// Replaces the state with `a`, a snapshot() of a state of the same
  /// optimizer type and width (dense: and size); a table takes its row
  /// count from a.steps. Throws std::invalid_argument, changing nothing,
  /// when the arrays do not fit.
  void restore(arrays a);

  enum class kind : uint8_t { sgd, momentum, adam, adagrad };

private:
  optimizer_state(const optimizer_config& cfg, size_t width, bool rows);

  void grow(size_t elements);

  optimizer_config cfg_;
  kind kind_ = kind::sgd;
  bool rows_ = false;
  size_t width_ = 0;
  size_t size_ = 0;
  // momentum: velocity; adam: m; adagrad: accumulator.
  std::vector<float> slot1_;
  // adam: v.
  std::vector<float> slot2_;
  std::vector<uint64_t> steps_;
};

} // namespace af::gpu
