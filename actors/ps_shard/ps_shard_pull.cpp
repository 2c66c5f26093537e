// ps_shard_state: variables and rows (checks, rows materialised on first
// use) and pull answers, whole or in parts (runtime/protocol/ps.hpp).
#include "actorflow/actors/ps_shard/detail/ps_shard_state_impl.hpp"

#include <algorithm>

#include "actorflow/gpu/layers.hpp"
#include "actorflow/runtime/core/wire_dtype.hpp"

namespace af {

std::string ps_shard_state::impl::check_var(uint32_t var) const {
  if (var >= vars.size())
    return "unknown variable " + std::to_string(var) + " (the model has "
           + std::to_string(vars.size()) + ")";
  return {};
}

std::string ps_shard_state::impl::check_rows(uint32_t var,
                                             const tensor& index) const {
  auto& v = vars[var];
  if (index.type() != dtype::i64 || index.shape().size() != 1)
    return describe(var) + ": row ids must be i64 [rows], got "
           + dtype_name(index.type()) + " " + gpu::shape_string(index.shape());
  auto* ids = index.data_as<int64_t>();
  for (int64_t j = 0; j < index.elements(); ++j) {
    auto r = ids[j];
    if (r < 0 || r >= v.rows)
      return describe(var) + ": row " + std::to_string(r)
             + " is out of range [0, " + std::to_string(v.rows) + ")";
    auto owner = ps_row_shard(r, cfg.shards);
    if (owner != cfg.shard)
      return describe(var) + ": row " + std::to_string(r) + " belongs to shard "
             + std::to_string(owner) + ", not " + std::to_string(cfg.shard);
  }
  return {};
}

size_t ps_shard_state::impl::row_pos(variable& v, int64_t r) {
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

std::string ps_shard_state::impl::check_pull(const ps_pull& req) const {
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

uint64_t ps_shard_state::impl::dense_elements() const {
  uint64_t n = 0;
  for (auto& v : vars)
    if (!v.spec.sparse)
      n += v.hi - v.lo;
  return n;
}

ps_params ps_shard_state::impl::answer(const ps_pull& req) {
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
  if (cfg.wire != dtype::f32)
    for (auto& s : out.slices)
      s.values = narrow_values(s.values, cfg.wire);
  return out;
}

} // namespace af
