// Internal to the shard (not installed): the state machine's data and the
// declaration of ps_shard_state::impl, whose members are defined by concern
// in the files named at each section below. The contract is
// actors/ps_shard/ps_shard.hpp's; the protocol runtime/protocol/ps.hpp's.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <caf/binary_deserializer.hpp>
#include <caf/deserializer.hpp>
#include <caf/error.hpp>
#include <caf/sec.hpp>
#include <caf/serializer.hpp>

#include "actorflow/actors/ps_shard/ps_shard.hpp"

namespace af {

namespace detail {

// One variable's part on this shard.
struct variable {
  variable(gpu::param_spec s, gpu::optimizer_state o)
    : spec(std::move(s)), opt(std::move(o)) {}

  gpu::param_spec spec;
  // Dense: the slice [lo, hi) of the flattened variable.
  uint64_t lo = 0;
  uint64_t hi = 0;
  // Sparse: the table's shape and where each materialised row sits.
  int64_t rows = 0;
  size_t dim = 0;
  std::unordered_map<int64_t, size_t> pos;
  // Sparse: [materialised rows, dim], in pos order.
  std::vector<float> values;
  // Dense: [hi - lo] floats, shared with the views in pull answers that
  // are still on their way (copied before a change while one is: see
  // writable()).
  std::shared_ptr<buffer> dense;
  gpu::optimizer_state opt;

  const float* dense_data() const {
    return reinterpret_cast<const float*>(dense->data());
  }
  size_t dense_size() const { return dense->size() / sizeof(float); }
  // The dense values, to change: a copy first if an answer still holds
  // them (copy-on-write).
  float* writable() {
    if (dense.use_count() > 1) {
      auto fresh = std::make_shared<buffer>(dense->size(), true);
      if (dense->size() > 0) // (an empty slice has no memory at all)
        std::memcpy(fresh->data(), dense->data(), dense->size());
      dense = std::move(fresh);
    }
    return reinterpret_cast<float*>(dense->data());
  }
  // A view of dense elements [from, from + n), shared.
  tensor view(size_t from, size_t n) const {
    return tensor::view(dtype::f32, {static_cast<int64_t>(n)}, dense,
                        from * sizeof(float));
  }
};

// The summed gradients of one update for one variable.
struct var_grad {
  // The first whole-slice gradient of the update, shared with its push:
  // an update of one push (asynchronous training) applies it without a
  // copy; a second one makes `dense` the sum.
  tensor first;
  bool has_first = false;
  bool has_dense = false;
  std::vector<float> dense;           // the whole slice
  std::map<uint64_t, float> elements; // top-k: slice-local element -> sum
  std::map<int64_t, std::vector<float>> rows; // sparse: row id -> sum
};

// One update: a push, or at tau = 0 every push of a clock.
struct update {
  uint64_t samples = 0;
  uint64_t pushes = 0;
  uint64_t staleness = 0; // the largest of its pushes
  std::vector<var_grad> vars;
};

struct worker_info {
  uint64_t clock = 0; // last step pushed
  bool live = true;
  // At a checkpoint cut (ps_pause_atom): out of the clocks like a worker
  // that left, but not done; registering again ends it.
  bool paused = false;
};

struct pending_pull {
  uint64_t ticket;
  ps_pull req;
};

// A push in parts (ps.hpp) whose parts are not all in yet.
struct partial_push {
  uint32_t parts = 0;
  uint64_t read_version = 0;
  uint64_t samples = 0;
  std::vector<bool> got; // per part
  uint32_t count = 0;    // parts in
  // Dense gradients without an index, assembled over the shard's slice
  // (written once per element: pieces may not overlap).
  struct assembly {
    tensor values;                     // f32 [hi - lo]
    std::map<uint64_t, uint64_t> have; // pieces in: slice-local lo -> hi
    uint64_t covered = 0;
  };
  std::map<uint32_t, assembly> dense;
  std::vector<ps_slice> others; // sparse rows, top-k: as they came
};

inline bool has_index(const ps_slice& s) {
  return s.index.type() == dtype::i64 || s.index.elements() > 0;
}

// --- the values of a snapshot (ps_shard_snapshot.cpp; format: ps_shard.hpp) -

// Numbers saved as one raw block (host byte order, as a tensor's payload
// travels) instead of one by one: a shard holds millions of them.
template <class T>
struct raw_array {
  std::vector<T> values;
};

template <class Inspector, class T>
typename Inspector::result_type inspect(Inspector& f, raw_array<T>& x) {
  if constexpr (std::is_base_of<caf::serializer, Inspector>::value) {
    auto n = x.values.size();
    if (auto err = f.begin_sequence(n))
      return err;
    if (n > 0)
      if (auto err = f.apply_raw(n * sizeof(T), x.values.data()))
        return err;
    return f.end_sequence();
  } else if constexpr (std::is_base_of<caf::deserializer, Inspector>::value) {
    size_t n = 0;
    if (auto err = f.begin_sequence(n))
      return err;
    // Never allocate more than the bytes can hold.
    if (auto* bin = dynamic_cast<caf::binary_deserializer*>(&f))
      if (n > bin->remaining() / sizeof(T))
        return caf::make_error(caf::sec::end_of_stream,
                               "ps_shard: array truncated");
    x.values.resize(n);
    if (n > 0)
      if (auto err = f.apply_raw(n * sizeof(T), x.values.data()))
        return err;
    return f.end_sequence();
  } else {
    return f(x.values);
  }
}

// One variable's part.
struct variable_state {
  std::string name;
  bool sparse = false;
  std::vector<int64_t> shape;
  raw_array<int64_t> ids;    // sparse: the rows materialised, in values' order
  raw_array<float> values;   // dense: the slice; sparse: ids x dim
  raw_array<uint64_t> steps; // the optimizer's (gpu::optimizer_state::arrays)
  raw_array<float> slot1;
  raw_array<float> slot2;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, variable_state& x) {
  return f(x.name, x.sparse, x.shape, x.ids, x.values, x.steps, x.slot1,
           x.slot2);
}

struct worker_state {
  uint32_t id = 0;
  uint64_t clock = 0;
  uint8_t live = 0; // 0 left, 1 live, 2 paused at a checkpoint cut
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_state& x) {
  return f(x.id, x.clock, x.live);
}

struct row_gradient {
  int64_t row = 0;
  raw_array<float> sum; // dim
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, row_gradient& x) {
  return f(x.row, x.sum);
}

// The summed gradients of a clock for one variable (a var_grad).
struct gradient_state {
  uint32_t var = 0;
  bool has_dense = false;
  raw_array<float> dense; // has_dense: the whole slice
  std::vector<std::pair<uint64_t, float>> elements; // top-k: slice-local
  std::vector<row_gradient> rows;                   // sparse
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, gradient_state& x) {
  return f(x.var, x.has_dense, x.dense, x.elements, x.rows);
}

// The pushes accepted for an incomplete clock (an update).
struct clock_state {
  uint64_t step = 0;
  uint64_t samples = 0;
  uint64_t pushes = 0;
  uint64_t staleness = 0;
  std::vector<gradient_state> vars; // by ascending var, those with any
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, clock_state& x) {
  return f(x.step, x.samples, x.pushes, x.staleness, x.vars);
}

} // namespace detail

struct ps_shard_state::impl {
  using variable = detail::variable;
  using var_grad = detail::var_grad;
  using update = detail::update;
  using worker_info = detail::worker_info;
  using pending_pull = detail::pending_pull;
  using partial_push = detail::partial_push;

  ps_shard_config cfg;
  std::vector<variable> vars;
  uint64_t version = 0;
  ps_shard_stats stats;
  std::map<uint32_t, worker_info> workers;
  std::map<uint64_t, update> clocks; // tau = 0: pushes of incomplete clocks
  std::vector<pending_pull> pulls;   // in arrival order
  std::vector<std::pair<uint64_t, uint64_t>> waits; // ticket, steps
  // Pushes in parts, by worker and step (not in snapshots).
  std::map<std::pair<uint32_t, uint64_t>, partial_push> partials;

  // --- workers and clocks (ps_shard_state.cpp) ------------------------------

  // Initialises the dense slices; throws std::invalid_argument for a bad
  // config.
  explicit impl(ps_shard_config c);

  bool synchronous() const { return cfg.staleness && *cfg.staleness == 0; }
  std::string describe(uint32_t var) const;

  // Expected workers that neither registered nor left yet.
  uint64_t missing() const;
  // The slowest live worker's clock; no_clock when nobody can hold back.
  uint64_t min_clock() const;
  bool finished() const;
  bool can_answer(const ps_pull& req) const;
  worker_info& join(uint32_t worker);
  // At tau = 0, applies (in step order) every clock that no live worker
  // holds up any more; call after anything that may move the slowest
  // clock. Otherwise updates are applied as pushes arrive: nothing to do.
  void apply_completed_clocks();

  // --- rows and pulls (ps_shard_pull.cpp) -----------------------------------

  std::string check_var(uint32_t var) const;
  std::string check_rows(uint32_t var, const tensor& index) const;
  // Where row `r` of a sparse variable sits, materialising it on first use.
  size_t row_pos(variable& v, int64_t r);
  std::string check_pull(const ps_pull& req) const;
  // Elements of the dense slices laid end to end (ps.hpp, parts).
  uint64_t dense_elements() const;
  ps_params answer(const ps_pull& req);

  // --- pushes and updates (ps_shard_push.cpp) -------------------------------

  std::string check_grad(const ps_slice& g) const;
  void add(update& u, const ps_push& req, uint64_t staleness);
  void apply(update& u);
  // The checks every push and every part of one passes first. Returns an
  // error, or "" with `duplicate` set for a retry of an applied push
  // (acknowledged with applied = false, nothing else done).
  std::string admit(const ps_push& req, ps_push_ack& ack, bool& duplicate);
  std::string push(const ps_push& req, ps_push_ack& ack);

  // --- pushes in parts (ps_shard_push_parts.cpp) ----------------------------

  // Checks part `req` of a push in parts against what is in already (`pp`,
  // null for the first part) without changing anything.
  std::string check_part(const ps_push& req, const partial_push* pp) const;
  // A part of a push in parts: kept until every part is in, then the
  // whole is handled by push() as one push.
  std::string push_part(const ps_push& req, ps_push_ack& ack);
  void drop_partials(uint32_t worker);

  // --- snapshots (ps_shard_snapshot.cpp; format: ps_shard.hpp) --------------

  std::string snapshot() const;
  // Throws std::invalid_argument saying what is wrong; then nothing
  // changed.
  void restore(const std::string& bytes);
  // Row ids read from a snapshot must be rows this shard could hold.
  void check_row(uint32_t var, int64_t row) const;
  // Variable i and a clock as read, checked against the config.
  variable restored_variable(uint32_t i, detail::variable_state& s) const;
  update restored_clock(detail::clock_state& s) const;
};

} // namespace af
