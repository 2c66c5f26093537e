#include "actors/ps_shard.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>
#include <unordered_map>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/sec.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <caf/typed_response_promise.hpp>

#include <spdlog/spdlog.h>

#include "runtime/census.hpp"
#include "runtime/crc32c.hpp"
#include "runtime/stream.hpp"

namespace af {

namespace {

constexpr uint64_t no_clock = std::numeric_limits<uint64_t>::max();

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i > 0 ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

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

// At most this many pushes in parts per worker wait for their other parts
// (a worker has one push in flight; retries may add one).
constexpr size_t max_partial_per_worker = 4;

bool has_index(const ps_slice& s) {
  return s.index.type() == dtype::i64 || s.index.elements() > 0;
}

// --- snapshot encoding (format: ps_shard.hpp) --------------------------------

static_assert(std::endian::native == std::endian::little,
              "snapshots copy little-endian integers and floats as bytes");

constexpr char snapshot_magic[8] = {'A', 'F', 'P', 'S', 'S', 'N', 'A', 'P'};
constexpr uint32_t snapshot_version = 1;

struct byte_writer {
  std::string out;

  void raw(const void* p, size_t n) {
    out.append(static_cast<const char*>(p), n);
  }
  template <class T>
  void put(T x) {
    raw(&x, sizeof x);
  }
  void u8(uint8_t x) { put(x); }
  void u32(uint32_t x) { put(x); }
  void u64(uint64_t x) { put(x); }
  void i64(int64_t x) { put(x); }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  template <class T>
  void array(const T* p, size_t n) {
    raw(p, n * sizeof(T));
  }
};

// Reads what byte_writer wrote; throws std::invalid_argument naming the
// offset when the bytes end early or a count cannot fit in what is left.
struct byte_reader {
  std::string_view in;
  size_t at = 0;

  [[noreturn]] void fail(const std::string& what) const {
    throw std::invalid_argument("offset " + std::to_string(at) + ": " + what);
  }
  void need(uint64_t n, const char* what) const {
    if (n > in.size() - at)
      fail(std::string{"truncated: "} + what + " needs " + std::to_string(n)
           + " bytes, " + std::to_string(in.size() - at) + " left");
  }
  void raw(void* p, size_t n, const char* what) {
    need(n, what);
    if (n > 0)
      std::memcpy(p, in.data() + at, n);
    at += n;
  }
  template <class T>
  T get(const char* what) {
    T x;
    raw(&x, sizeof x, what);
    return x;
  }
  uint8_t u8(const char* what) { return get<uint8_t>(what); }
  uint32_t u32(const char* what) { return get<uint32_t>(what); }
  uint64_t u64(const char* what) { return get<uint64_t>(what); }
  int64_t i64(const char* what) { return get<int64_t>(what); }
  bool flag(const char* what) {
    auto x = u8(what);
    if (x > 1)
      fail(std::string{what} + " is " + std::to_string(x) + ", not 0 or 1");
    return x == 1;
  }
  std::string str(const char* what) {
    auto n = u32(what);
    need(n, what);
    std::string s{in.substr(at, n)};
    at += n;
    return s;
  }
  // n values of T (n counted in the snapshot: checked before allocating).
  template <class T>
  std::vector<T> array(uint64_t n, const char* what) {
    if (n > (in.size() - at) / sizeof(T))
      fail(std::string{"truncated: "} + what + " of " + std::to_string(n)
           + " values, " + std::to_string(in.size() - at) + " bytes left");
    std::vector<T> v(static_cast<size_t>(n));
    raw(v.data(), v.size() * sizeof(T), what);
    return v;
  }
};

} // namespace

std::string check(const ps_shard_config& cfg) {
  if (cfg.shards == 0)
    return "shards must be >= 1";
  if (cfg.shard >= cfg.shards)
    return "shard " + std::to_string(cfg.shard) + " of "
           + std::to_string(cfg.shards) + " shards (indices start at 0)";
  if (auto err = gpu::check(cfg.optimizer); !err.empty())
    return "optimizer: " + err;
  for (auto& p : cfg.params) {
    bool bad = std::any_of(p.shape.begin(), p.shape.end(),
                           [](int64_t d) { return d < 0; });
    if (p.sparse && (p.shape.size() != 2 || p.shape[1] <= 0))
      bad = true;
    if (bad)
      return "variable \"" + p.name + "\" has shape " + shape_string(p.shape)
             + (p.sparse ? " (sparse variables need [rows, dim], dim > 0)"
                         : "");
  }
  return {};
}

// --- the state machine -----------------------------------------------------

struct ps_shard_state::impl {
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

  explicit impl(ps_shard_config c) : cfg(std::move(c)) {
    if (auto err = check(cfg); !err.empty())
      throw std::invalid_argument(cfg.name + ": " + err);
    stats.shard = cfg.shard;
    vars.reserve(cfg.params.size());
    for (auto& p : cfg.params) {
      if (p.sparse) {
        auto dim = static_cast<size_t>(p.shape[1]);
        auto& v =
          vars.emplace_back(p, gpu::optimizer_state::rows(cfg.optimizer, dim));
        v.rows = p.shape[0];
        v.dim = dim;
        continue;
      }
      auto r =
        ps_dense_slice(static_cast<uint64_t>(p.size()), cfg.shard, cfg.shards);
      auto n = static_cast<size_t>(r.hi - r.lo);
      auto& v =
        vars.emplace_back(p, gpu::optimizer_state::dense(cfg.optimizer, n));
      v.lo = r.lo;
      v.hi = r.hi;
      v.dense = std::make_shared<buffer>(n * sizeof(float), true);
      auto* x = v.writable();
      for (size_t i = 0; i < n; ++i)
        x[i] = gpu::initial_value(p, cfg.seed, r.lo + i);
    }
  }

  bool synchronous() const { return cfg.staleness && *cfg.staleness == 0; }

  std::string describe(uint32_t var) const {
    return "variable " + std::to_string(var) + " \"" + vars[var].spec.name
           + "\"";
  }

  // --- clocks --------------------------------------------------------------

  // Expected workers that neither registered nor left yet.
  uint64_t missing() const {
    return cfg.expected_workers > workers.size()
             ? cfg.expected_workers - workers.size()
             : 0;
  }

  // The slowest live worker's clock; no_clock when nobody can hold back.
  uint64_t min_clock() const {
    if (missing() > 0)
      return 0;
    uint64_t m = no_clock;
    for (auto& [id, w] : workers)
      if (w.live && !w.paused)
        m = std::min(m, w.clock);
    return m;
  }

  bool finished() const {
    size_t left = 0;
    for (auto& [id, w] : workers) {
      if (w.live)
        return false;
      ++left;
    }
    return left >= std::max<size_t>(1, cfg.expected_workers);
  }

  bool can_answer(const ps_pull& req) const {
    if (req.worker == ps_observer || !cfg.staleness)
      return true;
    auto m = min_clock();
    return req.clock <= m || req.clock - m <= *cfg.staleness;
  }

  worker_info& join(uint32_t worker) {
    auto& w = workers[worker];
    w.live = true;
    w.paused = false;
    return w;
  }

  // --- rows ----------------------------------------------------------------

  std::string check_rows(uint32_t var, const tensor& index) const {
    auto& v = vars[var];
    if (index.type() != dtype::i64 || index.shape().size() != 1)
      return describe(var) + ": row ids must be i64 [rows], got "
             + dtype_name(index.type()) + " " + shape_string(index.shape());
    auto* ids = index.data_as<int64_t>();
    for (int64_t j = 0; j < index.elements(); ++j) {
      auto r = ids[j];
      if (r < 0 || r >= v.rows)
        return describe(var) + ": row " + std::to_string(r)
               + " is out of range [0, " + std::to_string(v.rows) + ")";
      auto owner = ps_row_shard(r, cfg.shards);
      if (owner != cfg.shard)
        return describe(var) + ": row " + std::to_string(r)
               + " belongs to shard " + std::to_string(owner) + ", not "
               + std::to_string(cfg.shard);
    }
    return {};
  }

  std::string check_var(uint32_t var) const {
    if (var >= vars.size())
      return "unknown variable " + std::to_string(var) + " (the model has "
             + std::to_string(vars.size()) + ")";
    return {};
  }

  // Where row `r` of a sparse variable sits, materialising it on first use.
  size_t row_pos(variable& v, int64_t r) {
    auto [it, fresh] = v.pos.try_emplace(r, 0);
    if (!fresh)
      return it->second;
    auto p = v.opt.add_rows(1);
    it->second = p;
    v.values.resize((p + 1) * v.dim);
    auto first = static_cast<uint64_t>(r) * v.dim;
    for (size_t j = 0; j < v.dim; ++j)
      v.values[p * v.dim + j] = gpu::initial_value(v.spec, cfg.seed, first + j);
    ++stats.rows;
    return p;
  }

  // --- pulls ---------------------------------------------------------------

  std::string check_pull(const ps_pull& req) const {
    if (req.parts == 0 || req.part >= req.parts)
      return "part " + std::to_string(req.part) + " of "
             + std::to_string(req.parts) + " parts";
    for (auto& s : req.rows) {
      if (auto err = check_var(s.var); !err.empty())
        return err;
      if (!vars[s.var].spec.sparse)
        return describe(s.var)
               + " is dense: its slice comes with every pull, ask rows of "
                 "sparse variables only";
      if (auto err = check_rows(s.var, s.index); !err.empty())
        return err;
    }
    return {};
  }

  static tensor floats(const float* data, size_t n,
                       std::vector<int64_t> shape) {
    auto t = tensor::allocate(dtype::f32, std::move(shape));
    if (n > 0)
      std::memcpy(t.mutable_data(), data, n * sizeof(float));
    return t;
  }

  // Elements of the dense slices laid end to end (ps.hpp, parts).
  uint64_t dense_elements() const {
    uint64_t n = 0;
    for (auto& v : vars)
      if (!v.spec.sparse)
        n += v.hi - v.lo;
    return n;
  }

  ps_params answer(const ps_pull& req) {
    ps_params out;
    out.shard = cfg.shard;
    out.version = version;
    if (req.parts <= 1) {
      for (uint32_t i = 0; i < vars.size(); ++i) {
        auto& v = vars[i];
        if (v.spec.sparse)
          continue;
        ps_slice s;
        s.var = i;
        s.offset = v.lo;
        s.values = v.view(0, v.dense_size());
        out.slices.push_back(std::move(s));
      }
    } else {
      // Part `part` of the line of dense elements: the pieces of the
      // variables that fall into it.
      auto want = ps_dense_slice(dense_elements(), req.part, req.parts);
      uint64_t base = 0;
      for (uint32_t i = 0; i < vars.size(); ++i) {
        auto& v = vars[i];
        if (v.spec.sparse)
          continue;
        auto n = v.hi - v.lo;
        auto lo = std::max(want.lo, base);
        auto hi = std::min(want.hi, base + n);
        if (lo < hi) {
          ps_slice s;
          s.var = i;
          s.offset = v.lo + (lo - base);
          auto k = static_cast<size_t>(hi - lo);
          s.values = v.view(static_cast<size_t>(lo - base), k);
          out.slices.push_back(std::move(s));
        }
        base += n;
      }
    }
    for (auto& want : req.rows) {
      auto& v = vars[want.var];
      auto r = want.index.elements();
      auto* ids = want.index.data_as<int64_t>();
      std::vector<size_t> at(static_cast<size_t>(r));
      for (int64_t j = 0; j < r; ++j)
        at[j] = row_pos(v, ids[j]);
      auto t = tensor::allocate(dtype::f32, {r, static_cast<int64_t>(v.dim)});
      auto* dst = t.mutable_data_as<float>();
      for (int64_t j = 0; j < r; ++j)
        std::memcpy(dst + j * v.dim, v.values.data() + at[j] * v.dim,
                    v.dim * sizeof(float));
      ps_slice s;
      s.var = want.var;
      s.index = want.index;
      s.values = std::move(t);
      out.slices.push_back(std::move(s));
    }
    return out;
  }

  // --- pushes --------------------------------------------------------------

  std::string check_grad(const ps_slice& g) const {
    if (auto err = check_var(g.var); !err.empty())
      return "gradient for " + err;
    auto& v = vars[g.var];
    if (g.values.type() != dtype::f32)
      return describe(g.var) + ": gradient values must be f32, got "
             + dtype_name(g.values.type());
    auto k = g.values.elements();
    if (v.spec.sparse) {
      if (!has_index(g))
        return describe(g.var) + " is sparse: its gradient needs row ids";
      if (auto err = check_rows(g.var, g.index); !err.empty())
        return err;
      auto want = g.index.elements() * static_cast<int64_t>(v.dim);
      if (k != want)
        return describe(g.var) + ": " + std::to_string(k)
               + " gradient values for " + std::to_string(g.index.elements())
               + " rows of " + std::to_string(v.dim);
      return {};
    }
    auto range = "[" + std::to_string(v.lo) + ", " + std::to_string(v.hi) + ")";
    if (has_index(g)) {
      if (g.index.type() != dtype::i64 || g.index.shape().size() != 1)
        return describe(g.var) + ": element indices must be i64 [k], got "
               + dtype_name(g.index.type()) + " "
               + shape_string(g.index.shape());
      if (k != g.index.elements())
        return describe(g.var) + ": " + std::to_string(k)
               + " gradient values for " + std::to_string(g.index.elements())
               + " element indices";
      auto* idx = g.index.data_as<int64_t>();
      for (int64_t j = 0; j < k; ++j)
        if (idx[j] < 0 || static_cast<uint64_t>(idx[j]) < v.lo
            || static_cast<uint64_t>(idx[j]) >= v.hi)
          return describe(g.var) + ": element " + std::to_string(idx[j])
                 + " is outside this shard's slice " + range;
      return {};
    }
    if (g.offset != v.lo || static_cast<uint64_t>(k) != v.hi - v.lo)
      return describe(g.var) + ": gradient for elements ["
             + std::to_string(g.offset) + ", "
             + std::to_string(g.offset + static_cast<uint64_t>(k))
             + "), this shard's slice is " + range;
    return {};
  }

  void add(update& u, const ps_push& req, uint64_t staleness) {
    u.samples += req.samples;
    ++u.pushes;
    if (req.samples > 0)
      u.staleness = std::max(u.staleness, staleness);
    if (u.vars.empty())
      u.vars.resize(vars.size());
    for (auto& g : req.grads) {
      auto& v = vars[g.var];
      auto& a = u.vars[g.var];
      auto* x = g.values.data_as<float>();
      auto k = g.values.elements();
      if (v.spec.sparse) {
        auto* ids = g.index.data_as<int64_t>();
        for (int64_t j = 0; j < g.index.elements(); ++j) {
          auto& row = a.rows[ids[j]];
          row.resize(v.dim, 0.0f);
          for (size_t e = 0; e < v.dim; ++e)
            row[e] += x[j * v.dim + e];
        }
      } else if (has_index(g)) {
        auto* idx = g.index.data_as<int64_t>();
        for (int64_t j = 0; j < k; ++j)
          a.elements[static_cast<uint64_t>(idx[j]) - v.lo] += x[j];
      } else if (!a.has_first && !a.has_dense) {
        a.first = g.values;
        a.has_first = true;
      } else {
        if (!a.has_dense) {
          auto* f = a.first.data_as<float>();
          a.dense.assign(f, f + a.first.elements());
          a.has_dense = true;
        }
        for (int64_t i = 0; i < k; ++i)
          a.dense[i] += x[i];
      }
    }
  }

  void apply(update& u) {
    stats.pushes += u.pushes;
    if (u.samples == 0)
      return;
    double lr = gpu::learning_rate_at(cfg.optimizer, version);
    if (cfg.scale_lr_by_staleness && u.staleness > 1)
      lr /= static_cast<double>(u.staleness);
    auto samples = static_cast<float>(u.samples);
    for (size_t i = 0; i < u.vars.size(); ++i) {
      auto& v = vars[i];
      auto& a = u.vars[i];
      if (a.has_first && !a.has_dense && a.elements.empty()) {
        v.opt.apply(v.writable(), a.first.data_as<float>(),
                    static_cast<size_t>(a.first.elements()), lr,
                    1.0f / samples);
      } else if (a.has_first || a.has_dense) {
        if (!a.has_dense) {
          auto* f = a.first.data_as<float>();
          a.dense.assign(f, f + a.first.elements());
          a.has_dense = true;
        }
        for (auto& [e, g] : a.elements)
          a.dense[e] += g;
        v.opt.apply(v.writable(), a.dense.data(), a.dense.size(), lr,
                    1.0f / samples);
      } else if (!a.elements.empty()) {
        std::vector<uint64_t> idx;
        std::vector<float> g;
        idx.reserve(a.elements.size());
        g.reserve(a.elements.size());
        for (auto& [e, x] : a.elements) {
          idx.push_back(e);
          g.push_back(x / samples);
        }
        v.opt.apply_at(v.writable(), idx.data(), g.data(), idx.size(), lr);
      } else if (!a.rows.empty()) {
        std::vector<size_t> at;
        std::vector<float> g;
        at.reserve(a.rows.size());
        g.reserve(a.rows.size() * v.dim);
        for (auto& [r, x] : a.rows) {
          at.push_back(row_pos(v, r)); // may grow v.values: no pointers yet
          for (auto e : x)
            g.push_back(e / samples);
        }
        v.opt.apply_rows(v.values.data(), at.data(), g.data(), at.size(), lr);
      }
    }
    ++version;
    stats.version = version;
  }

  void complete_clocks() {
    auto m = min_clock();
    while (!clocks.empty() && clocks.begin()->first <= m) {
      apply(clocks.begin()->second);
      clocks.erase(clocks.begin());
    }
  }

  // The checks every push and every part of one passes first. Returns an
  // error, or "" with `duplicate` set for a retry of an applied push
  // (acknowledged with applied = false, nothing else done).
  std::string admit(const ps_push& req, ps_push_ack& ack, bool& duplicate) {
    if (req.worker == ps_observer)
      return "the observer cannot push";
    if (req.step == 0)
      return "steps are 1-based, got step 0";
    auto it = workers.find(req.worker);
    if (it != workers.end() && !it->second.live)
      return "worker " + std::to_string(req.worker)
             + " has left (done or down); it must register again";
    if (it != workers.end() && req.step <= it->second.clock) {
      ++stats.duplicates;
      ack = ps_push_ack{false, 0, version};
      duplicate = true;
      return {};
    }
    if (req.samples == 0 && !req.grads.empty())
      return "gradients with samples = 0";
    return {};
  }

  std::string push(const ps_push& req, ps_push_ack& ack) {
    bool duplicate = false;
    if (auto err = admit(req, ack, duplicate); !err.empty() || duplicate)
      return err;
    for (auto& g : req.grads)
      if (auto err = check_grad(g); !err.empty())
        return err;
    join(req.worker).clock = req.step;
    auto staleness =
      version > req.read_version ? version - req.read_version : 0;
    if (req.samples > 0) {
      stats.staleness_sum += staleness;
      stats.staleness_max = std::max(stats.staleness_max, staleness);
    } else {
      ++stats.skipped;
    }
    if (synchronous()) {
      add(clocks[req.step], req, staleness);
      complete_clocks();
    } else {
      update u;
      add(u, req, staleness);
      apply(u);
    }
    ack = ps_push_ack{true, staleness, version};
    return {};
  }

  // --- pushes in parts (ps.hpp) ----------------------------------------------

  // Checks part `req` of a push in parts against what is in already (`pp`,
  // null for the first part) without changing anything.
  std::string check_part(const ps_push& req, const partial_push* pp) const {
    if (pp != nullptr
        && (pp->parts != req.parts || pp->samples != req.samples
            || pp->read_version != req.read_version))
      return "part " + std::to_string(req.part)
             + " does not match the push's other parts (parts "
             + std::to_string(pp->parts) + ", samples "
             + std::to_string(pp->samples) + ", read_version "
             + std::to_string(pp->read_version) + ")";
    // Dense pieces: (var, slice-local lo, hi), to check for overlaps.
    std::vector<std::tuple<uint32_t, uint64_t, uint64_t>> pieces;
    for (auto& g : req.grads) {
      if (auto err = check_var(g.var); !err.empty())
        return "gradient for " + err;
      auto& v = vars[g.var];
      if (v.spec.sparse || has_index(g)) {
        if (auto err = check_grad(g); !err.empty())
          return err;
        continue;
      }
      if (g.values.type() != dtype::f32)
        return describe(g.var) + ": gradient values must be f32, got "
               + dtype_name(g.values.type());
      auto k = static_cast<uint64_t>(g.values.elements());
      if (g.offset < v.lo || g.offset > v.hi || k > v.hi - g.offset)
        return describe(g.var) + ": gradient piece for elements ["
               + std::to_string(g.offset) + ", "
               + std::to_string(g.offset + k) + ") is outside this shard's "
               + "slice [" + std::to_string(v.lo) + ", "
               + std::to_string(v.hi) + ")";
      if (k > 0)
        pieces.emplace_back(g.var, g.offset - v.lo, g.offset - v.lo + k);
    }
    std::sort(pieces.begin(), pieces.end());
    for (size_t i = 0; i < pieces.size(); ++i) {
      auto [var, lo, hi] = pieces[i];
      bool overlap = i > 0 && std::get<0>(pieces[i - 1]) == var
                     && std::get<2>(pieces[i - 1]) > lo;
      if (!overlap && pp != nullptr) {
        if (auto a = pp->dense.find(var); a != pp->dense.end()) {
          auto& have = a->second.have;
          auto next = have.lower_bound(lo);
          if (next != have.end() && next->first < hi)
            overlap = true;
          if (next != have.begin() && std::prev(next)->second > lo)
            overlap = true;
        }
      }
      if (overlap)
        return describe(var) + ": gradient pieces overlap at slice element "
               + std::to_string(lo) + " (each element comes once per push)";
    }
    return {};
  }

  // A part of a push in parts: kept until every part is in, then the
  // whole is handled by push() as one push.
  std::string push_part(const ps_push& req, ps_push_ack& ack) {
    bool duplicate = false;
    if (auto err = admit(req, ack, duplicate); !err.empty() || duplicate)
      return err;
    auto key = std::make_pair(req.worker, req.step);
    auto pit = partials.find(key);
    partial_push* pp = pit == partials.end() ? nullptr : &pit->second;
    if (pp != nullptr && pp->parts == req.parts && pp->got[req.part]) {
      ack = ps_push_ack{true, 0, version}; // a repeat: in already
      return {};
    }
    if (pp == nullptr) {
      size_t open = 0;
      for (auto& [k, p] : partials)
        open += k.first == req.worker ? 1 : 0;
      if (open >= max_partial_per_worker)
        return "more than " + std::to_string(max_partial_per_worker)
               + " pushes in parts wait for their other parts";
    }
    if (auto err = check_part(req, pp); !err.empty())
      return err;
    if (pp == nullptr) {
      pp = &partials[key];
      pp->parts = req.parts;
      pp->read_version = req.read_version;
      pp->samples = req.samples;
      pp->got.assign(req.parts, false);
    }
    for (auto& g : req.grads) {
      auto& v = vars[g.var];
      if (v.spec.sparse || has_index(g)) {
        pp->others.push_back(g);
        continue;
      }
      auto& a = pp->dense[g.var];
      if (a.values.elements() != static_cast<int64_t>(v.hi - v.lo)
          || a.values.type() != dtype::f32)
        a.values = tensor::allocate(dtype::f32,
                                    {static_cast<int64_t>(v.hi - v.lo)});
      auto k = static_cast<uint64_t>(g.values.elements());
      if (k == 0)
        continue;
      auto lo = g.offset - v.lo;
      std::memcpy(a.values.mutable_data_as<float>() + lo, g.values.data(),
                  k * sizeof(float));
      a.have.emplace(lo, lo + k);
      a.covered += k;
    }
    pp->got[req.part] = true;
    if (++pp->count < pp->parts) {
      ack = ps_push_ack{true, 0, version};
      return {};
    }
    // Every part is in: one push of the whole, and the worker's older
    // unfinished pushes in parts can never apply any more.
    ps_push whole;
    whole.worker = req.worker;
    whole.step = req.step;
    whole.read_version = pp->read_version;
    whole.samples = pp->samples;
    std::string err;
    for (auto& [var, a] : pp->dense) {
      auto& v = vars[var];
      if (a.covered != v.hi - v.lo && err.empty())
        err = describe(var) + ": the parts of the push hold "
              + std::to_string(a.covered) + " of the "
              + std::to_string(v.hi - v.lo)
              + " gradient elements of this shard's slice";
      ps_slice sl;
      sl.var = var;
      sl.offset = v.lo;
      sl.values = std::move(a.values);
      whole.grads.push_back(std::move(sl));
    }
    for (auto& g : pp->others)
      whole.grads.push_back(std::move(g));
    for (auto i = partials.begin(); i != partials.end();)
      if (i->first.first == req.worker && i->first.second <= req.step)
        i = partials.erase(i);
      else
        ++i;
    if (!err.empty())
      return err;
    return push(whole, ack);
  }

  void drop_partials(uint32_t worker) {
    for (auto i = partials.begin(); i != partials.end();)
      if (i->first.first == worker)
        i = partials.erase(i);
      else
        ++i;
  }

  // --- snapshots (format: ps_shard.hpp) -------------------------------------

  void put_stats(byte_writer& w) const {
    for (auto x : {stats.pushes, stats.duplicates, stats.skipped,
                   stats.staleness_sum, stats.staleness_max,
                   stats.delayed_pulls, stats.rows, stats.workers_lost})
      w.u64(x);
  }

  static void put_variable(byte_writer& w, const variable& v) {
    w.str(v.spec.name);
    w.u8(v.spec.sparse ? 1 : 0);
    w.u32(static_cast<uint32_t>(v.spec.shape.size()));
    w.array(v.spec.shape.data(), v.spec.shape.size());
    if (v.spec.sparse) {
      std::vector<int64_t> ids(v.pos.size());
      for (auto& [row, p] : v.pos)
        ids[p] = row;
      w.u64(ids.size());
      w.array(ids.data(), ids.size());
    } else {
      w.u64(v.hi - v.lo);
    }
    if (v.spec.sparse)
      w.array(v.values.data(), v.values.size());
    else
      w.array(v.dense_data(), v.dense_size());
    auto a = v.opt.snapshot();
    w.u64(a.steps.size());
    w.array(a.steps.data(), a.steps.size());
    w.u64(a.slot1.size());
    w.array(a.slot1.data(), a.slot1.size());
    w.u64(a.slot2.size());
    w.array(a.slot2.data(), a.slot2.size());
  }

  void put_clock(byte_writer& w, uint64_t step, const update& u) const {
    w.u64(step);
    w.u64(u.samples);
    w.u64(u.pushes);
    w.u64(u.staleness);
    auto used = [](const var_grad& a) {
      return a.has_first || a.has_dense || !a.elements.empty()
             || !a.rows.empty();
    };
    w.u32(
      static_cast<uint32_t>(std::count_if(u.vars.begin(), u.vars.end(), used)));
    for (uint32_t i = 0; i < u.vars.size(); ++i) {
      auto& a = u.vars[i];
      if (!used(a))
        continue;
      w.u32(i);
      w.u8(a.has_first || a.has_dense ? 1 : 0);
      if (a.has_dense)
        w.array(a.dense.data(), a.dense.size());
      else if (a.has_first)
        w.array(a.first.data_as<float>(),
                static_cast<size_t>(a.first.elements()));
      w.u64(a.elements.size());
      for (auto& [e, g] : a.elements) {
        w.u64(e);
        w.put(g);
      }
      w.u64(a.rows.size());
      for (auto& [r, g] : a.rows) {
        w.i64(r);
        w.array(g.data(), g.size());
      }
    }
  }

  std::string snapshot() const {
    byte_writer w;
    w.raw(snapshot_magic, sizeof snapshot_magic);
    w.u32(snapshot_version);
    w.u32(cfg.shard);
    w.u32(cfg.shards);
    w.str(cfg.optimizer.type);
    w.u64(version);
    put_stats(w);
    w.u32(static_cast<uint32_t>(vars.size()));
    for (auto& v : vars)
      put_variable(w, v);
    w.u32(static_cast<uint32_t>(workers.size()));
    for (auto& [id, info] : workers) {
      w.u32(id);
      w.u64(info.clock);
      w.u8(info.paused ? 2 : info.live ? 1 : 0);
    }
    w.u32(static_cast<uint32_t>(clocks.size()));
    for (auto& [step, u] : clocks)
      put_clock(w, step, u);
    w.u32(masked_crc32c(w.out.data(), w.out.size()));
    return std::move(w.out);
  }

  // Row ids read from a snapshot must be rows this shard could hold.
  void check_row(byte_reader& r, uint32_t var, int64_t row) const {
    auto& v = vars[var];
    if (row < 0 || row >= v.rows || ps_row_shard(row, cfg.shards) != cfg.shard)
      r.fail(describe(var) + ": row " + std::to_string(row)
             + (row < 0 || row >= v.rows ? " is out of range"
                                         : " belongs to another shard"));
  }

  variable get_variable(byte_reader& r, uint32_t i) const {
    auto& mine = vars[i];
    auto& spec = mine.spec;
    auto name = r.str("variable name");
    if (name != spec.name)
      r.fail("variable " + std::to_string(i) + " is \"" + name
             + "\", the model's is \"" + spec.name + "\"");
    bool sparse = r.flag("sparse flag");
    auto rank = r.u32("rank");
    auto shape = r.array<int64_t>(rank, "shape");
    if (sparse != spec.sparse || shape != spec.shape)
      r.fail(describe(i) + " is " + (sparse ? "sparse " : "dense ")
             + shape_string(shape) + " in the snapshot, "
             + (spec.sparse ? "sparse " : "dense ") + shape_string(spec.shape)
             + " in the model");
    variable v{
      spec, sparse
              ? gpu::optimizer_state::rows(cfg.optimizer, mine.dim)
              : gpu::optimizer_state::dense(cfg.optimizer, mine.hi - mine.lo)};
    v.lo = mine.lo;
    v.hi = mine.hi;
    v.rows = mine.rows;
    v.dim = mine.dim;
    auto n = r.u64("row or element count");
    uint64_t floats = n;
    if (sparse) {
      auto ids = r.array<int64_t>(n, "row ids");
      for (size_t p = 0; p < ids.size(); ++p) {
        check_row(r, i, ids[p]);
        if (!v.pos.emplace(ids[p], p).second)
          r.fail(describe(i) + ": row " + std::to_string(ids[p])
                 + " appears twice");
      }
      floats = n * v.dim; // n <= rows, dim: no overflow
    } else if (n != v.hi - v.lo) {
      r.fail(describe(i) + ": " + std::to_string(n)
             + " elements, this shard's slice has "
             + std::to_string(v.hi - v.lo));
    }
    v.values = r.array<float>(floats, "values");
    if (!sparse) {
      v.dense = std::make_shared<buffer>(v.values.size() * sizeof(float), true);
      if (!v.values.empty())
        std::memcpy(v.dense->data(), v.values.data(),
                    v.values.size() * sizeof(float));
      v.values = {};
    }
    gpu::optimizer_state::arrays a;
    a.steps = r.array<uint64_t>(r.u64("step count"), "optimizer steps");
    a.slot1 = r.array<float>(r.u64("slot size"), "optimizer slot 1");
    a.slot2 = r.array<float>(r.u64("slot size"), "optimizer slot 2");
    if (sparse && a.steps.size() != n)
      r.fail(describe(i) + ": " + std::to_string(a.steps.size())
             + " optimizer step counts for " + std::to_string(n) + " rows");
    try {
      v.opt.restore(std::move(a));
    } catch (const std::invalid_argument& e) {
      r.fail(describe(i) + ": " + e.what());
    }
    return v;
  }

  std::pair<uint64_t, update> get_clock(byte_reader& r) const {
    std::pair<uint64_t, update> out;
    out.first = r.u64("clock step");
    auto& u = out.second;
    u.samples = r.u64("samples");
    u.pushes = r.u64("pushes");
    u.staleness = r.u64("staleness");
    u.vars.resize(vars.size());
    auto g = r.u32("gradient count");
    int64_t last = -1;
    for (uint32_t j = 0; j < g; ++j) {
      auto i = r.u32("variable index");
      if (i >= vars.size() || static_cast<int64_t>(i) <= last)
        r.fail("clock " + std::to_string(out.first) + ": variable index "
               + std::to_string(i) + " out of order or range");
      last = i;
      auto& v = vars[i];
      auto& a = u.vars[i];
      a.has_dense = r.flag("dense flag");
      if (a.has_dense && v.spec.sparse)
        r.fail(describe(i) + " is sparse, the clock has a dense gradient");
      if (a.has_dense)
        a.dense = r.array<float>(v.hi - v.lo, "dense gradient");
      auto e = r.u64("element count");
      if (e > 0 && v.spec.sparse)
        r.fail(describe(i) + " is sparse, the clock has element gradients");
      for (uint64_t k = 0; k < e; ++k) {
        auto at = r.u64("element");
        auto x = r.get<float>("element gradient");
        if (at >= v.hi - v.lo || !a.elements.emplace(at, x).second)
          r.fail(describe(i) + ": element " + std::to_string(at)
                 + " outside the slice or twice");
      }
      auto rows = r.u64("row count");
      if (rows > 0 && !v.spec.sparse)
        r.fail(describe(i) + " is dense, the clock has row gradients");
      for (uint64_t k = 0; k < rows; ++k) {
        auto row = r.i64("row id");
        check_row(r, i, row);
        auto x = r.array<float>(v.dim, "row gradient");
        if (!a.rows.emplace(row, std::move(x)).second)
          r.fail(describe(i) + ": row " + std::to_string(row) + " twice");
      }
    }
    return out;
  }

  void restore(const std::string& bytes) {
    if (bytes.size() < sizeof snapshot_magic + 8
        || std::memcmp(bytes.data(), snapshot_magic, sizeof snapshot_magic)
             != 0)
      throw std::invalid_argument(
        "not a parameter-server shard snapshot (no AFPSSNAP at offset 0)");
    byte_reader r{bytes, sizeof snapshot_magic};
    auto format = r.u32("format version");
    if (format != snapshot_version)
      r.fail("format version " + std::to_string(format) + ", this build reads "
             + std::to_string(snapshot_version));
    byte_reader crc_reader{bytes, bytes.size() - 4};
    auto stored = crc_reader.u32("CRC");
    auto computed = masked_crc32c(bytes.data(), bytes.size() - 4);
    if (stored != computed)
      throw std::invalid_argument(
        "damaged or truncated: the CRC of " + std::to_string(bytes.size())
        + " bytes does not match (stored " + std::to_string(stored)
        + ", computed " + std::to_string(computed) + ")");
    r.in = r.in.substr(0, bytes.size() - 4);

    auto shard = r.u32("shard");
    auto shards = r.u32("shards");
    if (shard != cfg.shard || shards != cfg.shards)
      r.fail("a snapshot of shard " + std::to_string(shard) + " of "
             + std::to_string(shards) + ", this is shard "
             + std::to_string(cfg.shard) + " of " + std::to_string(cfg.shards));
    auto type = r.str("optimizer type");
    if (type != cfg.optimizer.type)
      r.fail("optimizer \"" + type + "\" in the snapshot, \""
             + cfg.optimizer.type + "\" configured");
    auto new_version = r.u64("version");
    auto new_stats = stats;
    for (auto* x :
         {&new_stats.pushes, &new_stats.duplicates, &new_stats.skipped,
          &new_stats.staleness_sum, &new_stats.staleness_max,
          &new_stats.delayed_pulls, &new_stats.rows, &new_stats.workers_lost})
      *x = r.u64("stats");
    new_stats.shard = cfg.shard;
    new_stats.version = new_version;
    auto count = r.u32("variable count");
    if (count != vars.size())
      r.fail(std::to_string(count) + " variables in the snapshot, "
             + std::to_string(vars.size()) + " in the model");
    std::vector<variable> new_vars;
    new_vars.reserve(vars.size());
    for (uint32_t i = 0; i < count; ++i)
      new_vars.push_back(get_variable(r, i));
    std::map<uint32_t, worker_info> new_workers;
    auto n_workers = r.u32("worker count");
    for (uint32_t j = 0; j < n_workers; ++j) {
      auto id = r.u32("worker id");
      worker_info w;
      w.clock = r.u64("worker step");
      auto live = r.u8("live flag");
      if (live > 2)
        r.fail("live flag is " + std::to_string(live) + ", not 0, 1 or 2");
      w.live = live != 0;
      w.paused = live == 2;
      if (id == ps_observer
          || (!new_workers.empty() && id <= new_workers.rbegin()->first))
        r.fail("worker id " + std::to_string(id) + " out of order");
      new_workers.emplace(id, w);
    }
    std::map<uint64_t, update> new_clocks;
    auto n_clocks = r.u32("clock count");
    if (n_clocks > 0 && !synchronous())
      r.fail(std::to_string(n_clocks)
             + " incomplete clocks, but this shard is not synchronous "
               "(staleness 0)");
    for (uint32_t j = 0; j < n_clocks; ++j) {
      auto c = get_clock(r);
      if (!new_clocks.empty() && c.first <= new_clocks.rbegin()->first)
        r.fail("clock " + std::to_string(c.first) + " out of order");
      new_clocks.emplace(c.first, std::move(c.second));
    }
    if (r.at != r.in.size())
      r.fail(std::to_string(r.in.size() - r.at)
             + " bytes left after the snapshot");

    vars = std::move(new_vars);
    version = new_version;
    stats = new_stats;
    workers = std::move(new_workers);
    clocks = std::move(new_clocks);
  }
};

ps_shard_state::ps_shard_state(ps_shard_config cfg)
  : impl_(std::make_unique<impl>(std::move(cfg))) {
}

ps_shard_state::~ps_shard_state() = default;

const ps_shard_config& ps_shard_state::config() const noexcept {
  return impl_->cfg;
}

uint64_t ps_shard_state::register_worker(uint32_t worker, uint64_t clock) {
  auto& st = *impl_;
  if (worker != ps_observer) {
    auto& w = st.join(worker);
    w.clock = std::max(w.clock, clock);
    if (st.synchronous())
      st.complete_clocks();
  }
  return st.version;
}

uint64_t ps_shard_state::leave(uint32_t worker, bool lost) {
  auto& st = *impl_;
  if (worker == ps_observer)
    return st.version;
  auto [it, fresh] = st.workers.try_emplace(worker);
  if (!fresh && !it->second.live)
    return st.version;
  it->second.live = false;
  st.drop_partials(worker);
  if (lost)
    ++st.stats.workers_lost;
  if (st.synchronous())
    st.complete_clocks();
  return st.version;
}

uint64_t ps_shard_state::pause(uint32_t worker) {
  auto& st = *impl_;
  auto it = st.workers.find(worker);
  if (worker == ps_observer || it == st.workers.end() || !it->second.live
      || it->second.paused)
    return st.version;
  it->second.paused = true;
  if (st.synchronous())
    st.complete_clocks();
  return st.version;
}

uint64_t ps_shard_state::clock_of(uint32_t worker) const {
  auto it = impl_->workers.find(worker);
  return it == impl_->workers.end() ? 0 : it->second.clock;
}

bool ps_shard_state::is_live(uint32_t worker) const {
  auto it = impl_->workers.find(worker);
  return it != impl_->workers.end() && it->second.live;
}

std::string ps_shard_state::pull(uint64_t ticket, const ps_pull& req,
                                 std::optional<ps_params>& answer) {
  auto& st = *impl_;
  answer.reset();
  if (auto err = st.check_pull(req); !err.empty())
    return st.cfg.name + ": pull (worker " + std::to_string(req.worker)
           + "): " + err;
  if (req.worker != ps_observer && st.workers.count(req.worker) == 0)
    st.join(req.worker);
  if (st.can_answer(req)) {
    answer = st.answer(req);
    return {};
  }
  if (req.part == 0) // a pull in parts counts once
    ++st.stats.delayed_pulls;
  st.pulls.push_back(pending_pull{ticket, req});
  return {};
}

std::string ps_shard_state::push(const ps_push& req, ps_push_ack& ack) {
  std::string err;
  if (req.parts == 0 || req.part >= req.parts)
    err = "part " + std::to_string(req.part) + " of "
          + std::to_string(req.parts) + " parts";
  else if (req.parts == 1)
    err = impl_->push(req, ack);
  else
    err = impl_->push_part(req, ack);
  if (!err.empty())
    return impl_->cfg.name + ": push (worker " + std::to_string(req.worker)
           + ", step " + std::to_string(req.step) + "): " + err;
  return err;
}

std::optional<ps_progress> ps_shard_state::wait(uint64_t ticket,
                                                uint64_t steps) {
  if (impl_->stats.pushes >= steps || impl_->finished())
    return progress();
  impl_->waits.emplace_back(ticket, steps);
  return std::nullopt;
}

ps_shard_state::released ps_shard_state::take_released() {
  auto& st = *impl_;
  released out;
  std::vector<pending_pull> pulls;
  for (auto& p : st.pulls) {
    if (st.can_answer(p.req))
      out.pulls.emplace_back(p.ticket, st.answer(p.req));
    else
      pulls.push_back(std::move(p));
  }
  st.pulls = std::move(pulls);
  std::vector<std::pair<uint64_t, uint64_t>> waits;
  for (auto& w : st.waits) {
    if (st.stats.pushes >= w.second || st.finished())
      out.waits.emplace_back(w.first, progress());
    else
      waits.push_back(w);
  }
  st.waits = std::move(waits);
  return out;
}

size_t ps_shard_state::waiting() const noexcept {
  return impl_->pulls.size() + impl_->waits.size();
}

uint64_t ps_shard_state::version() const noexcept {
  return impl_->version;
}

ps_progress ps_shard_state::progress() const {
  return ps_progress{impl_->stats.pushes, impl_->finished()};
}

ps_shard_stats ps_shard_state::stats() const {
  auto s = impl_->stats;
  s.version = impl_->version;
  return s;
}

std::string ps_shard_state::snapshot() const {
  return impl_->snapshot();
}

void ps_shard_state::restore(const std::string& bytes) {
  try {
    impl_->restore(bytes);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(impl_->cfg.name + ": restore: " + e.what());
  }
}

std::vector<float> ps_shard_state::values(uint32_t var,
                                          const std::vector<int64_t>& rows) {
  auto& st = *impl_;
  if (auto err = st.check_var(var); !err.empty())
    throw std::out_of_range(st.cfg.name + ": " + err);
  auto& v = st.vars[var];
  if (!v.spec.sparse)
    return {v.dense_data(), v.dense_data() + v.dense_size()};
  auto index =
    tensor::allocate(dtype::i64, {static_cast<int64_t>(rows.size())});
  if (!rows.empty())
    std::memcpy(index.mutable_data(), rows.data(),
                rows.size() * sizeof(int64_t));
  if (auto err = st.check_rows(var, index); !err.empty())
    throw std::invalid_argument(st.cfg.name + ": " + err);
  std::vector<float> out;
  out.reserve(rows.size() * v.dim);
  for (auto r : rows) {
    auto p = st.row_pos(v, r);
    out.insert(out.end(), v.values.begin() + p * v.dim,
               v.values.begin() + (p + 1) * v.dim);
  }
  return out;
}

// --- the actor -------------------------------------------------------------

namespace {

struct shard_actor_state {
  std::unique_ptr<ps_shard_state> shard;
  std::string name;
  uint64_t next_ticket = 0;
  std::unordered_map<uint64_t, caf::typed_response_promise<ps_params>> pulls;
  std::unordered_map<uint64_t, caf::typed_response_promise<ps_progress>> waits;
  // Which actor speaks for each worker, and the actors monitored.
  std::map<uint32_t, caf::actor_addr> owner;
  std::set<caf::actor_addr> monitored;
  // Who restored this shard (ps_restore_atom): told of the pushes lost
  // when a worker joins a shard restored while the job ran.
  caf::actor restorer;
};

using shard_actor = caf::stateful_actor<shard_actor_state>;

// Remembers the sender as `worker`'s actor and monitors it. A pull or push
// only claims a worker nobody spoke for yet (implicit registration).
void track(shard_actor* self, uint32_t worker, bool claim) {
  if (worker == ps_observer)
    return;
  auto& st = self->state;
  auto sender = self->current_sender();
  if (!sender)
    return;
  if (!claim && st.owner.count(worker) > 0)
    return;
  auto addr = caf::actor_cast<caf::actor_addr>(sender);
  st.owner[worker] = addr;
  if (st.monitored.insert(addr).second)
    self->monitor(caf::actor_cast<caf::actor>(sender));
}

void release(shard_actor* self) {
  auto& st = self->state;
  auto r = st.shard->take_released();
  for (auto& [ticket, params] : r.pulls) {
    auto it = st.pulls.find(ticket);
    if (it == st.pulls.end())
      continue;
    it->second.deliver(std::move(params));
    st.pulls.erase(it);
  }
  for (auto& [ticket, progress] : r.waits) {
    auto it = st.waits.find(ticket);
    if (it == st.waits.end())
      continue;
    it->second.deliver(std::move(progress));
    st.waits.erase(it);
  }
}

caf::error invalid(std::string message) {
  spdlog::debug("{}", message);
  return caf::make_error(caf::sec::invalid_argument, std::move(message));
}

caf::behavior ps_shard_main(shard_actor* self, ps_shard_config cfg) {
  auto& init = self->state;
  init.name =
    cfg.name.empty() ? "ps[" + std::to_string(cfg.shard) + "]" : cfg.name;
  cfg.name = init.name;
  init.shard = std::make_unique<ps_shard_state>(std::move(cfg));
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& st = self->state;
    st.monitored.erase(dm.source);
    for (auto it = st.owner.begin(); it != st.owner.end();) {
      if (it->second != dm.source) {
        ++it;
        continue;
      }
      if (st.shard->is_live(it->first)) {
        spdlog::warn("{}: worker {} went down without done ({})", st.name,
                     it->first,
                     dm.reason ? caf::to_string(dm.reason) : "normal exit");
        st.shard->leave(it->first, true);
      }
      it = st.owner.erase(it);
    }
    release(self);
  });
  self->set_exit_handler([=](caf::exit_msg& msg) {
    // Requests that wait must not hang their senders.
    if (!msg.reason)
      return; // like CAF's default: a normal exit of a linked actor
    auto& st = self->state;
    for (auto& [ticket, rp] : st.pulls)
      rp.deliver(caf::make_error(caf::sec::request_receiver_down,
                                 st.name + " is shutting down"));
    for (auto& [ticket, rp] : st.waits)
      rp.deliver(caf::make_error(caf::sec::request_receiver_down,
                                 st.name + " is shutting down"));
    st.pulls.clear();
    st.waits.clear();
    self->quit(std::move(msg.reason));
  });
  return {
    [=](ps_register_atom, uint32_t worker) -> uint64_t {
      track(self, worker, true);
      auto v = self->state.shard->register_worker(worker);
      release(self);
      return v;
    },
    [=](ps_register_atom, uint32_t worker, uint64_t clock) -> uint64_t {
      auto& st = self->state;
      track(self, worker, true);
      auto had = st.shard->clock_of(worker);
      if (clock > had) {
        spdlog::warn("{}: worker {} joins at clock {}; its {} pushes since "
                     "clock {} are lost",
                     st.name, worker, clock, clock - had, had);
        if (st.restorer)
          self->send(st.restorer, ps_lost_atom::value, st.name, worker,
                     clock - had);
      }
      auto v = st.shard->register_worker(worker, clock);
      release(self);
      return v;
    },
    [=](ps_pause_atom, uint32_t worker) -> uint64_t {
      auto v = self->state.shard->pause(worker);
      release(self);
      return v;
    },
    [=](ps_done_atom, uint32_t worker) -> uint64_t {
      auto& st = self->state;
      st.owner.erase(worker);
      auto v = st.shard->leave(worker, false);
      release(self);
      return v;
    },
    [=](ps_pull_atom, const ps_pull& req) -> caf::result<ps_params> {
      auto& st = self->state;
      track(self, req.worker, false);
      auto ticket = st.next_ticket++;
      std::optional<ps_params> answer;
      if (auto err = st.shard->pull(ticket, req, answer); !err.empty())
        return invalid(std::move(err));
      if (answer)
        return std::move(*answer);
      auto rp = self->make_response_promise<ps_params>();
      st.pulls.emplace(ticket, rp);
      return rp;
    },
    [=](ps_push_atom, const ps_push& req) -> caf::result<ps_push_ack> {
      auto& st = self->state;
      track(self, req.worker, false);
      ps_push_ack ack;
      if (auto err = st.shard->push(req, ack); !err.empty())
        return invalid(std::move(err));
      release(self);
      return ack;
    },
    [=](ps_wait_atom, uint64_t steps) -> caf::result<ps_progress> {
      auto& st = self->state;
      auto ticket = st.next_ticket++;
      if (auto p = st.shard->wait(ticket, steps))
        return *p;
      auto rp = self->make_response_promise<ps_progress>();
      st.waits.emplace(ticket, rp);
      return rp;
    },
    [=](ps_stats_atom) -> ps_shard_stats { return self->state.shard->stats(); },
    [=](replica_lost_atom, const std::string& stage, uint32_t replica) {
      auto& st = self->state;
      if (stage != st.shard->config().worker_stage
          || !st.shard->is_live(replica))
        return;
      spdlog::warn("{}: worker {} lost (the coordinator says {}[{}] is "
                   "gone)",
                   st.name, replica, stage, replica);
      st.shard->leave(replica, true);
      release(self);
    },
    [=](replica_lost_atom, const std::string& stage, uint32_t replica,
        bool ended) {
      // From the coordinator to a shard it restored while the job runs: a
      // worker that ended (done) or was lost before, as far as the
      // restored snapshot knows still live or not known at all.
      auto& st = self->state;
      if (stage != st.shard->config().worker_stage)
        return;
      st.shard->leave(replica, !ended);
      release(self);
    },
    [=](ps_snapshot_atom) -> std::string {
      return self->state.shard->snapshot();
    },
    [=](ps_restore_atom, const std::string& bytes) -> caf::result<uint64_t> {
      auto& st = self->state;
      try {
        st.shard->restore(bytes);
      } catch (const std::invalid_argument& e) {
        spdlog::warn("{}", e.what());
        return invalid(e.what());
      }
      spdlog::info("{}: restored at version {}", st.name, st.shard->version());
      st.restorer = caf::actor_cast<caf::actor>(self->current_sender());
      release(self);
      return st.shard->version();
    },
  };
}

} // namespace

caf::actor spawn_ps_shard(caf::actor_system& sys, ps_shard_config cfg) {
  if (auto err = check(cfg); !err.empty())
    throw std::invalid_argument((cfg.name.empty() ? "ps shard" : cfg.name)
                                + ": " + err);
  auto label = cfg.name.empty() ? "ps shard " + std::to_string(cfg.shard)
                                : cfg.name;
  auto a = sys.spawn<caf::detached>(ps_shard_main, std::move(cfg));
  census_add(a, std::move(label));
  return a;
}

} // namespace af
