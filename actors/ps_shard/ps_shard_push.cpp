// ps_shard_state: pushes (checks, acknowledgements, staleness) and the
// updates they make: one per push, or at tau = 0 one per clock.
#include "actorflow/actors/ps_shard/detail/ps_shard_state_impl.hpp"

#include <algorithm>

#include "actorflow/gpu/layers.hpp"

namespace af {

using detail::has_index;

std::string ps_shard_state::impl::check_grad(const ps_slice& g) const {
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
  // Appended in steps: GCC 12 at -O3 warns (-Wrestrict, a known false
  // positive) on "[" + std::to_string(...) once this is inlined here.
  std::string range = "[";
  range += std::to_string(v.lo);
  range += ", ";
  range += std::to_string(v.hi);
  range += ")";
  if (has_index(g)) {
    if (g.index.type() != dtype::i64 || g.index.shape().size() != 1)
      return describe(g.var) + ": element indices must be i64 [k], got "
             + dtype_name(g.index.type()) + " "
             + gpu::shape_string(g.index.shape());
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

void ps_shard_state::impl::add(update& u, const ps_push& req,
                               uint64_t staleness) {
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

void ps_shard_state::impl::apply(update& u) {
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
    if (v.spec.buffer) {
      // A module's buffer: the pushes' changes, added as they are (as if
      // the trainers' steps had run one after another on these values).
      if (a.has_first || a.has_dense) {
        auto* d = a.has_dense ? a.dense.data() : a.first.data_as<float>();
        auto* x = v.writable();
        for (size_t e = 0; e < v.dense_size(); ++e)
          x[e] += d[e];
      }
      continue;
    }
    if (a.has_first && !a.has_dense && a.elements.empty()) {
      v.opt.apply(v.writable(), a.first.data_as<float>(),
                  static_cast<size_t>(a.first.elements()), lr, 1.0f / samples);
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

std::string ps_shard_state::impl::admit(const ps_push& req, ps_push_ack& ack,
                                        bool& duplicate) {
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

std::string ps_shard_state::impl::push(const ps_push& req, ps_push_ack& ack) {
  bool duplicate = false;
  if (auto err = admit(req, ack, duplicate); !err.empty() || duplicate)
    return err;
  for (auto& g : req.grads)
    if (auto err = check_grad(g); !err.empty())
      return err;
  join(req.worker).clock = req.step;
  auto staleness = version > req.read_version ? version - req.read_version : 0;
  if (req.samples > 0) {
    stats.staleness_sum += staleness;
    stats.staleness_max = std::max(stats.staleness_max, staleness);
  } else {
    ++stats.skipped;
  }
  if (synchronous()) {
    add(clocks[req.step], req, staleness);
    apply_completed_clocks();
  } else {
    update u;
    add(u, req, staleness);
    apply(u);
  }
  ack = ps_push_ack{true, staleness, version};
  return {};
}

} // namespace af
