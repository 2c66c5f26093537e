// ps_shard_state: pushes in parts (runtime/protocol/ps.hpp, "Parts"): each part is
// checked as it arrives, dense pieces are assembled over the shard's slice,
// and the whole goes through push() once the last part is in.
#include "actorflow/actors/ps_shard/detail/ps_shard_state_impl.hpp"

#include <algorithm>
#include <tuple>

namespace af {

namespace {

// At most this many pushes in parts per worker wait for their other parts
// (a worker has one push in flight; retries may add one).
constexpr size_t max_partial_per_worker = 4;

} // namespace

using detail::has_index;

std::string ps_shard_state::impl::check_part(const ps_push& req,
                                             const partial_push* pp) const {
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
             + std::to_string(g.offset) + ", " + std::to_string(g.offset + k)
             + ") is outside this shard's " + "slice [" + std::to_string(v.lo)
             + ", " + std::to_string(v.hi) + ")";
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

std::string ps_shard_state::impl::push_part(const ps_push& req,
                                            ps_push_ack& ack) {
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
      a.values =
        tensor::allocate(dtype::f32, {static_cast<int64_t>(v.hi - v.lo)});
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

void ps_shard_state::impl::drop_partials(uint32_t worker) {
  for (auto i = partials.begin(); i != partials.end();)
    if (i->first.first == worker)
      i = partials.erase(i);
    else
      ++i;
}

} // namespace af
