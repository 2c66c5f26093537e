// ps_shard_state: the snapshot codec - snapshot() and restore(), a state
// frame of runtime/state/state_io.hpp whose values actors/ps_shard/ps_shard.hpp lists.
#include "actorflow/actors/ps_shard/detail/ps_shard_state_impl.hpp"

#include <bit>
#include <cmath>
#include <stdexcept>
#include <string_view>

#include "actorflow/gpu/layers.hpp"
#include "actorflow/runtime/state/state_io.hpp"

namespace af {

namespace {

using detail::clock_state;
using detail::gradient_state;
using detail::row_gradient;
using detail::update;
using detail::var_grad;
using detail::variable;
using detail::variable_state;
using detail::worker_state;

static_assert(std::endian::native == std::endian::little,
              "snapshots hold arrays as little-endian raw blocks");

// The values' version: 1 was ActorFlow 0.1's own encoding ("AFPSSNAP").
const std::string snapshot_tag = "ps_shard/2";

[[noreturn]] void fail(const std::string& what) {
  throw std::invalid_argument(what);
}

template <class T>
std::vector<T> as_vector(const T* p, size_t n) {
  return {p, p + n};
}

variable_state saved(const variable& v) {
  variable_state s;
  s.name = v.spec.name;
  s.sparse = v.spec.sparse;
  s.shape = v.spec.shape;
  if (v.spec.sparse) {
    s.ids.values.resize(v.pos.size());
    for (auto& [row, p] : v.pos)
      s.ids.values[p] = row;
    s.values.values = v.values;
  } else {
    s.values.values = as_vector(v.dense_data(), v.dense_size());
  }
  auto a = v.opt.snapshot();
  s.steps.values = std::move(a.steps);
  s.slot1.values = std::move(a.slot1);
  s.slot2.values = std::move(a.slot2);
  return s;
}

clock_state saved(uint64_t step, const update& u) {
  clock_state s{step, u.samples, u.pushes, u.staleness, {}};
  for (uint32_t i = 0; i < u.vars.size(); ++i) {
    auto& a = u.vars[i];
    if (!a.has_first && !a.has_dense && a.elements.empty() && a.rows.empty())
      continue;
    auto& g = s.vars.emplace_back();
    g.var = i;
    g.has_dense = a.has_first || a.has_dense;
    if (a.has_dense)
      g.dense.values = a.dense;
    else if (a.has_first)
      g.dense.values = as_vector(a.first.data_as<float>(),
                                 static_cast<size_t>(a.first.elements()));
    g.elements.assign(a.elements.begin(), a.elements.end());
    for (auto& [r, sum] : a.rows)
      g.rows.push_back(row_gradient{r, {sum}});
  }
  return s;
}

// Why `bytes` are refused when load_state refused them with `what`, in the
// words restore() has always used for each case.
std::string refusal(const std::string& bytes, const std::string& what) {
  if (bytes.starts_with("AFPSSNAP"))
    return "a parameter-server shard snapshot of format version 1, written "
           "by ActorFlow 0.1; this ActorFlow reads state frames of format "
           + std::to_string(state_format) + " only";
  // A frame's first four bytes (runtime/state/state_io.hpp).
  if (!bytes.starts_with("AFST"))
    return "not a parameter-server shard snapshot (no state frame at "
           "offset 0)";
  auto tag = state_tag(bytes);
  if (!tag.empty() && tag != snapshot_tag)
    return "not a parameter-server shard snapshot but a " + tag + " state";
  // The frame's format version, a big-endian u16 after the magic.
  if (bytes.size() >= 6
      && (static_cast<uint8_t>(bytes[4]) << 8 | static_cast<uint8_t>(bytes[5]))
           != state_format)
    return what;
  return "damaged or truncated: " + what;
}

} // namespace

std::string ps_shard_state::impl::snapshot() const {
  auto s = stats;
  s.shard = cfg.shard;
  s.version = version;
  std::vector<variable_state> vs;
  vs.reserve(vars.size());
  for (auto& v : vars)
    vs.push_back(saved(v));
  std::vector<worker_state> ws;
  for (auto& [id, info] : workers)
    ws.push_back({id, info.clock,
                  static_cast<uint8_t>(info.paused ? 2 : info.live ? 1 : 0)});
  std::vector<clock_state> cs;
  for (auto& [step, u] : clocks)
    cs.push_back(saved(step, u));
  return save_state(snapshot_tag, s, cfg.shards, cfg.optimizer.type, vs, ws,
                    cs);
}

void ps_shard_state::impl::check_row(uint32_t var, int64_t row) const {
  auto& v = vars[var];
  if (row < 0 || row >= v.rows || ps_row_shard(row, cfg.shards) != cfg.shard)
    fail(describe(var) + ": row " + std::to_string(row)
         + (row < 0 || row >= v.rows ? " is out of range"
                                     : " belongs to another shard"));
}

ps_shard_state::impl::variable
ps_shard_state::impl::restored_variable(uint32_t i, variable_state& s) const {
  auto& mine = vars[i];
  auto& spec = mine.spec;
  if (s.name != spec.name)
    fail("variable " + std::to_string(i) + " is \"" + s.name
         + "\", the model's is \"" + spec.name + "\"");
  if (s.sparse != spec.sparse || s.shape != spec.shape)
    fail(describe(i) + " is " + (s.sparse ? "sparse " : "dense ")
         + gpu::shape_string(s.shape) + " in the snapshot, "
         + (spec.sparse ? "sparse " : "dense ") + gpu::shape_string(spec.shape)
         + " in the model");
  variable v{spec, s.sparse
                     ? gpu::optimizer_state::rows(cfg.optimizer, mine.dim)
                     : gpu::optimizer_state::dense(cfg.optimizer,
                                                   mine.hi - mine.lo)};
  v.lo = mine.lo;
  v.hi = mine.hi;
  v.rows = mine.rows;
  v.dim = mine.dim;
  auto& ids = s.ids.values;
  auto& values = s.values.values;
  uint64_t n = s.sparse ? ids.size() : v.hi - v.lo;
  if (s.sparse) {
    for (size_t p = 0; p < ids.size(); ++p) {
      check_row(i, ids[p]);
      if (!v.pos.emplace(ids[p], p).second)
        fail(describe(i) + ": row " + std::to_string(ids[p])
             + " appears twice");
    }
  } else if (!ids.empty()) {
    fail(describe(i) + " is dense, the snapshot has row ids");
  }
  auto floats = s.sparse ? n * v.dim : n; // n <= rows, dim: no overflow
  if (values.size() != floats)
    fail(describe(i) + ": " + std::to_string(values.size()) + " values, "
         + (s.sparse ? std::to_string(n) + " rows of "
                         + std::to_string(v.dim) + " need "
                     : "this shard's slice has ")
         + std::to_string(floats));
  if (s.sparse) {
    v.values = std::move(values);
  } else {
    v.dense = std::make_shared<buffer>(values.size() * sizeof(float), true);
    if (!values.empty())
      std::memcpy(v.dense->data(), values.data(),
                  values.size() * sizeof(float));
  }
  gpu::optimizer_state::arrays a;
  a.steps = std::move(s.steps.values);
  a.slot1 = std::move(s.slot1.values);
  a.slot2 = std::move(s.slot2.values);
  if (s.sparse && a.steps.size() != n)
    fail(describe(i) + ": " + std::to_string(a.steps.size())
         + " optimizer step counts for " + std::to_string(n) + " rows");
  try {
    v.opt.restore(std::move(a));
  } catch (const std::invalid_argument& e) {
    fail(describe(i) + ": " + e.what());
  }
  return v;
}

ps_shard_state::impl::update
ps_shard_state::impl::restored_clock(clock_state& s) const {
  update u;
  u.samples = s.samples;
  u.pushes = s.pushes;
  u.staleness = s.staleness;
  u.vars.resize(vars.size());
  auto clock = "clock " + std::to_string(s.step);
  int64_t last = -1;
  for (auto& g : s.vars) {
    auto i = g.var;
    if (i >= vars.size() || static_cast<int64_t>(i) <= last)
      fail(clock + ": variable index " + std::to_string(i)
           + " out of order or range");
    last = i;
    auto& v = vars[i];
    auto& a = u.vars[i];
    a.has_dense = g.has_dense;
    if (a.has_dense && v.spec.sparse)
      fail(describe(i) + " is sparse, " + clock + " has a dense gradient");
    auto slice = v.hi - v.lo;
    if (g.dense.values.size() != (a.has_dense ? slice : 0))
      fail(describe(i) + ": " + clock + " has a dense gradient of "
           + std::to_string(g.dense.values.size()) + " elements"
           + (a.has_dense ? ", the slice has " + std::to_string(slice)
                          : " without its flag"));
    a.dense = std::move(g.dense.values);
    if (!g.elements.empty() && v.spec.sparse)
      fail(describe(i) + " is sparse, " + clock + " has element gradients");
    for (auto& [at, x] : g.elements) {
      // A shard never keeps a gradient that is not finite (it refuses such
      // pushes), and CAF 0.17 cannot even write one back: its pack754()
      // loops forever on an infinity.
      if (!std::isfinite(x))
        fail(describe(i) + ": element " + std::to_string(at) + " of " + clock
             + " has a gradient that is not finite");
      if (at >= slice || !a.elements.emplace(at, x).second)
        fail(describe(i) + ": element " + std::to_string(at)
             + " outside the slice or twice");
    }
    if (!g.rows.empty() && !v.spec.sparse)
      fail(describe(i) + " is dense, " + clock + " has row gradients");
    for (auto& r : g.rows) {
      check_row(i, r.row);
      if (r.sum.values.size() != v.dim)
        fail(describe(i) + ": row " + std::to_string(r.row) + " of " + clock
             + " has a gradient of " + std::to_string(r.sum.values.size())
             + " values, not " + std::to_string(v.dim));
      if (!a.rows.emplace(r.row, std::move(r.sum.values)).second)
        fail(describe(i) + ": row " + std::to_string(r.row) + " twice");
    }
  }
  return u;
}

void ps_shard_state::impl::restore(const std::string& bytes) {
  ps_shard_stats new_stats;
  uint32_t shards = 0;
  std::string type;
  std::vector<variable_state> vs;
  std::vector<worker_state> ws;
  std::vector<clock_state> cs;
  try {
    load_state(bytes, snapshot_tag, new_stats, shards, type, vs, ws, cs);
  } catch (const std::invalid_argument& e) {
    fail(refusal(bytes, e.what()));
  }
  if (new_stats.shard != cfg.shard || shards != cfg.shards)
    fail("a snapshot of shard " + std::to_string(new_stats.shard) + " of "
         + std::to_string(shards) + ", this is shard "
         + std::to_string(cfg.shard) + " of " + std::to_string(cfg.shards));
  if (type != cfg.optimizer.type)
    fail("optimizer \"" + type + "\" in the snapshot, \"" + cfg.optimizer.type
         + "\" configured");
  if (vs.size() != vars.size())
    fail(std::to_string(vs.size()) + " variables in the snapshot, "
         + std::to_string(vars.size()) + " in the model");
  std::vector<variable> new_vars;
  new_vars.reserve(vars.size());
  for (uint32_t i = 0; i < vs.size(); ++i)
    new_vars.push_back(restored_variable(i, vs[i]));
  std::map<uint32_t, worker_info> new_workers;
  for (auto& w : ws) {
    if (w.live > 2)
      fail("live flag is " + std::to_string(w.live) + ", not 0, 1 or 2");
    if (w.id == ps_observer
        || (!new_workers.empty() && w.id <= new_workers.rbegin()->first))
      fail("worker id " + std::to_string(w.id) + " out of order");
    new_workers.emplace(w.id, worker_info{w.clock, w.live != 0, w.live == 2});
  }
  std::map<uint64_t, update> new_clocks;
  if (!cs.empty() && !synchronous())
    fail(std::to_string(cs.size())
         + " incomplete clocks, but this shard is not synchronous "
           "(staleness 0)");
  for (auto& c : cs) {
    if (!new_clocks.empty() && c.step <= new_clocks.rbegin()->first)
      fail("clock " + std::to_string(c.step) + " out of order");
    new_clocks.emplace(c.step, restored_clock(c));
  }

  vars = std::move(new_vars);
  version = new_stats.version;
  stats = new_stats;
  workers = std::move(new_workers);
  clocks = std::move(new_clocks);
}

ps_snapshot_values read_ps_snapshot(const std::string& bytes) {
  ps_shard_stats stats;
  std::string type;
  std::vector<variable_state> vs;
  std::vector<worker_state> ws;
  std::vector<clock_state> cs;
  ps_snapshot_values out;
  try {
    load_state(bytes, snapshot_tag, stats, out.shards, type, vs, ws, cs);
  } catch (const std::invalid_argument& e) {
    fail(refusal(bytes, e.what()));
  }
  out.shard = stats.shard;
  if (out.shards == 0 || out.shard >= out.shards)
    fail("a snapshot of shard " + std::to_string(out.shard) + " of "
         + std::to_string(out.shards));
  for (auto& v : vs) {
    ps_snapshot_values::variable x;
    x.name = std::move(v.name);
    x.sparse = v.sparse;
    x.shape = std::move(v.shape);
    x.ids = std::move(v.ids.values);
    x.values = std::move(v.values.values);
    out.vars.push_back(std::move(x));
  }
  return out;
}

} // namespace af
