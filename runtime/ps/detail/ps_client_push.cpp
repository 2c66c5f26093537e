// ps_client::push: the gradients in a model cut into the shards' slices
// (dense ranges, sparse rows, or the top-k entries of error feedback),
// dense values in parts when large, sent without waiting; the previous
// push's acknowledgements collected on the way.
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "actorflow/runtime/ps/detail/ps_client_impl.hpp"
#include "actorflow/runtime/ps/ps_client.hpp"
#include "actorflow/runtime/testing/failpoint.hpp"

namespace af {

namespace {

// No NaN or Inf in p[0, n): an exponent test on the bits, which vectorises
// (std::isfinite in a loop does not).
bool all_finite(const float* p, size_t n) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, p + i, sizeof bits);
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

// Floats in the gradient of `p` (of the sparse one: `rows` rows).
size_t grad_count(const gpu::param_spec& p, const std::vector<int64_t>& rows) {
  return p.sparse ? rows.size() * static_cast<size_t>(p.row_size())
                  : static_cast<size_t>(p.size());
}

} // namespace

ps_client::push_result ps_client::push(gpu::param_store& m, uint64_t step,
                                       uint64_t samples,
                                       const std::vector<int64_t>& rows,
                                       double topk_fraction) {
  auto& d = *impl_;
  std::vector<ps_push> messages;
  std::vector<uint32_t> to;
  auto result =
    d.start_push(m, step, samples, rows, topk_fraction, messages, to);
  d.send_push(std::move(messages), std::move(to));
  d.clock = std::max(d.clock, step);
  return result;
}

ps_client::push_result
ps_client::push_then_pull(gpu::param_store& m, uint64_t step, uint64_t samples,
                          const std::vector<int64_t>& rows,
                          double topk_fraction, uint64_t clock,
                          const std::vector<int64_t>& next_rows) {
  auto& d = *impl_;
  if (d.pulling)
    throw std::logic_error("ps_client: a pull is already outstanding");
  std::vector<ps_push> messages;
  std::vector<uint32_t> to;
  auto result =
    d.start_push(m, step, samples, rows, topk_fraction, messages, to);
  d.pull_begin = std::chrono::steady_clock::now();
  d.plan_pull(clock, next_rows);
  // One message per shard each way, shard by shard (no parts): together.
  auto k = d.shards.size();
  bool together = messages.size() == k && d.pending_req.size() == k;
  for (size_t s = 0; together && s < k; ++s)
    together = to[s] == s && d.pending_shard[s] == s;
  if (together) {
    d.send_steps(std::move(messages));
  } else {
    d.send_push(std::move(messages), std::move(to));
    d.start_pull();
  }
  d.pulling = true;
  d.clock = std::max(d.clock, step);
  return result;
}

ps_client::push_result ps_client::impl::start_push(
  gpu::param_store& m, uint64_t step, uint64_t samples,
  const std::vector<int64_t>& rows, double topk_fraction,
  std::vector<ps_push>& messages, std::vector<uint32_t>& to) {
  failpoint("ps.push.before");
  push_result result;
  auto plan = plan_push(step, samples, topk_fraction);
  // Error feedback changes the residuals as it goes: find a NaN or Inf
  // first, so that a skipped step leaves every residual as it was.
  if (topk_fraction > 0)
    result.nonfinite = first_nonfinite(m, rows);
  slice_gradients(m, rows, topk_fraction, plan, result.nonfinite);
  messages_of(plan, !result.nonfinite.empty(), messages, to);
  // The previous push's acknowledgements come in now, not right after it
  // was sent: the shards apply a push while the worker computes the next.
  collect_acks(result);
  return result;
}

// Dense gradients in parts when large (not top-k: those are small): the
// shard's slices laid end to end, cut into parts[s] equal pieces as a pull
// is; part 0 also takes the sparse and top-k slices.
ps_client::impl::push_plan
ps_client::impl::plan_push(uint64_t step, uint64_t samples,
                           double topk_fraction) const {
  auto k = static_cast<uint32_t>(shards.size());
  push_plan plan;
  plan.pushes.resize(k);
  for (uint32_t s = 0; s < k; ++s) {
    plan.pushes[s].worker = worker;
    plan.pushes[s].step = step;
    plan.pushes[s].read_version = read_version[s];
    plan.pushes[s].samples = samples;
  }
  plan.parts.assign(k, 1);
  plan.pieces.resize(k);
  for (uint32_t s = 0; s < k; ++s) {
    if (topk_fraction <= 0)
      plan.parts[s] = parts_of(s);
    plan.pieces[s].resize(plan.parts[s]);
  }
  return plan;
}

std::string
ps_client::impl::first_nonfinite(gpu::param_store& m,
                                 const std::vector<int64_t>& rows) const {
  std::vector<float> g;
  for (size_t i = 0; i < params.size(); ++i) {
    auto count = grad_count(params[i], rows);
    g.resize(count);
    m.dev().download(g.data(), m.grad(i).get(), count * sizeof(float));
    if (!all_finite(g.data(), count))
      return params[i].name;
  }
  return {};
}

void ps_client::impl::slice_gradients(gpu::param_store& m,
                                      const std::vector<int64_t>& rows,
                                      double topk_fraction, push_plan& plan,
                                      std::string& nonfinite) {
  std::vector<float> g;
  for (size_t i = 0; i < params.size() && nonfinite.empty(); ++i) {
    auto& spec = params[i];
    if (!spec.sparse && (topk_fraction <= 0 || spec.buffer)) {
      slice_dense(m, i, plan, nonfinite);
      continue;
    }
    auto count = grad_count(spec, rows);
    g.resize(count);
    m.dev().download(g.data(), m.grad(i).get(), count * sizeof(float));
    if (!all_finite(g.data(), count)) {
      nonfinite = spec.name;
      break;
    }
    if (spec.sparse)
      slice_sparse(g, i, rows, plan);
    else
      slice_topk(g, i, topk_fraction, plan);
  }
}

// A dense gradient slice of `e` floats for shard s: in the memory shared
// with the shard's node when there is some (sent from there without a
// copy), unless it is narrowed for the wire first.
tensor ps_client::impl::values_for(uint32_t s, uint64_t e) const {
  auto bytes = static_cast<size_t>(e) * sizeof(float);
  if (wire == dtype::f32 && remote(s))
    if (auto buf = data_plane::shared_buffer(sys, shards[s], bytes))
      return tensor(dtype::f32, {static_cast<int64_t>(e)}, std::move(buf));
  return tensor::allocate(dtype::f32, {static_cast<int64_t>(e)});
}

// Straight from the device into the pushed slices: one copy.
void ps_client::impl::slice_dense(gpu::param_store& m, size_t i, push_plan& plan,
                                  std::string& nonfinite) const {
  auto& spec = params[i];
  auto k = static_cast<uint32_t>(shards.size());
  auto count = static_cast<size_t>(spec.size());
  auto& parts = plan.parts;
  for (uint32_t s = 0; s < k; ++s) {
    auto range = ps_dense_slice(count, s, k);
    auto n = range.hi - range.lo;
    auto base = line_base[s][i];
    for (uint32_t p = 0; p < parts[s]; ++p) {
      // This variable's elements in part p (parts[s] = 1: all).
      auto cut = ps_dense_slice(line_size[s], p, parts[s]);
      auto lo = std::max(cut.lo, base);
      auto hi = std::min(cut.hi, base + n);
      if (parts[s] == 1 || (n == 0 && p == 0))
        lo = base, hi = base + n; // (an empty slice goes in part 0)
      else if (lo >= hi)
        continue;
      auto e = hi - lo;
      ps_slice sl;
      sl.var = static_cast<uint32_t>(i);
      sl.offset = range.lo + (lo - base);
      sl.values = values_for(s, e);
      if (e > 0) {
        m.dev().download(sl.values.mutable_data(),
                         m.grad(i).f32() + sl.offset, e * sizeof(float));
        if (!all_finite(sl.values.data_as<float>(), e))
          nonfinite = spec.name;
      }
      // One part: in pushes[s] in variable order, as ever.
      (parts[s] == 1 ? plan.pushes[s].grads : plan.pieces[s][p])
        .push_back(std::move(sl));
    }
  }
}

// Each shard's rows of the sparse gradient `g` (one row per entry of
// `rows`).
void ps_client::impl::slice_sparse(const std::vector<float>& g, size_t i,
                                   const std::vector<int64_t>& rows,
                                   push_plan& plan) const {
  auto& spec = params[i];
  auto k = static_cast<uint32_t>(shards.size());
  auto dim = static_cast<size_t>(spec.row_size());
  std::vector<std::vector<size_t>> owned(k);
  for (size_t j = 0; j < rows.size(); ++j)
    owned[ps_row_shard(rows[j], k)].push_back(j);
  for (uint32_t s = 0; s < k; ++s) {
    auto r = static_cast<int64_t>(owned[s].size());
    ps_slice sl;
    sl.var = static_cast<uint32_t>(i);
    sl.index = tensor::allocate(dtype::i64, {r});
    sl.values = tensor::allocate(dtype::f32, {r, spec.row_size()});
    auto* ids = sl.index.mutable_data_as<int64_t>();
    auto* vals = sl.values.mutable_data_as<float>();
    for (size_t j = 0; j < owned[s].size(); ++j) {
      ids[j] = rows[owned[s][j]];
      std::memcpy(vals + j * dim, g.data() + owned[s][j] * dim,
                  dim * sizeof(float));
    }
    plan.pushes[s].grads.push_back(std::move(sl));
  }
}

// Error feedback: the residual kept from earlier pushes is added to `g`,
// the largest `topk_fraction` of the entries go to their shards as
// (index, value) slices, the rest is kept for the next push.
void ps_client::impl::slice_topk(std::vector<float>& g, size_t i,
                                 double topk_fraction, push_plan& plan) {
  auto k = static_cast<uint32_t>(shards.size());
  auto count = g.size();
  auto& res = residual[i];
  res.resize(count, 0.0f);
  for (size_t j = 0; j < count; ++j)
    g[j] += res[j];
  auto keep = std::max<size_t>(
    1, static_cast<size_t>(topk_fraction * static_cast<double>(count)));
  keep = std::min(keep, count);
  std::vector<float> mags(count);
  for (size_t j = 0; j < count; ++j)
    mags[j] = std::fabs(g[j]);
  std::nth_element(mags.begin(),
                   mags.begin() + static_cast<std::ptrdiff_t>(count - keep),
                   mags.end());
  auto threshold = mags[count - keep];
  std::vector<std::vector<int64_t>> idx(k);
  std::vector<std::vector<float>> val(k);
  size_t sent = 0;
  uint32_t s = 0;
  auto range = ps_dense_slice(count, 0, k);
  for (size_t j = 0; j < count; ++j) {
    while (j >= range.hi && s + 1 < k)
      range = ps_dense_slice(count, ++s, k);
    if (sent < keep && std::fabs(g[j]) >= threshold) {
      idx[s].push_back(static_cast<int64_t>(j));
      val[s].push_back(g[j]);
      res[j] = 0.0f;
      ++sent;
    } else {
      res[j] = g[j];
    }
  }
  for (uint32_t t = 0; t < k; ++t) {
    ps_slice sl;
    sl.var = static_cast<uint32_t>(i);
    auto r = static_cast<int64_t>(idx[t].size());
    sl.index = tensor::allocate(dtype::i64, {r});
    sl.values = tensor::allocate(dtype::f32, {r});
    if (r > 0) {
      std::memcpy(sl.index.mutable_data(), idx[t].data(),
                  idx[t].size() * sizeof(int64_t));
      std::memcpy(sl.values.mutable_data(), val[t].data(),
                  val[t].size() * sizeof(float));
    }
    plan.pushes[t].grads.push_back(std::move(sl));
  }
}

// One message per shard, or one per part: the sparse and top-k slices (in
// pushes[s] so far) go with part 0.
void ps_client::impl::messages_of(push_plan& plan, bool clock_only,
                                  std::vector<ps_push>& messages,
                                  std::vector<uint32_t>& to) {
  auto k = static_cast<uint32_t>(plan.pushes.size());
  for (uint32_t s = 0; s < k; ++s) {
    auto& whole = plan.pushes[s];
    if (clock_only) {
      whole.grads.clear();
      whole.samples = 0;
      messages.push_back(std::move(whole));
      to.push_back(s);
      continue;
    }
    for (uint32_t p = 0; p < plan.parts[s]; ++p) {
      ps_push msg;
      msg.worker = whole.worker;
      msg.step = whole.step;
      msg.read_version = whole.read_version;
      msg.samples = whole.samples;
      msg.part = p;
      msg.parts = plan.parts[s];
      // Variables in order as before: dense pieces, then part 0's others.
      msg.grads = std::move(plan.pieces[s][p]);
      if (p == 0)
        for (auto& sl : whole.grads)
          msg.grads.push_back(std::move(sl));
      messages.push_back(std::move(msg));
      to.push_back(s);
    }
  }
}

void ps_client::impl::prepare(std::vector<ps_push>& messages,
                              const std::vector<uint32_t>& to) {
  for (size_t j = 0; j < messages.size(); ++j) {
    if (wire != dtype::f32)
      for (auto& g : messages[j].grads)
        g.values = narrow_values(g.values, wire);
    if (remote(to[j]))
      network_bytes += bytes_of(messages[j].grads);
  }
}

void ps_client::impl::send_push(std::vector<ps_push> messages,
                                std::vector<uint32_t> to) {
  prepare(messages, to);
  pushes.reserve(messages.size());
  for (size_t j = 0; j < messages.size(); ++j)
    pushes.push_back(self->request(shard(to[j]), awaited,
                                   ps_push_atom::value, messages[j]));
  failpoint("ps.push.sent");
  pushes_req = std::move(messages);
  pushes_shard = std::move(to);
}

void ps_client::impl::send_steps(std::vector<ps_push> messages) {
  prepare(messages, pending_shard);
  steps.reserve(messages.size());
  for (uint32_t s = 0; s < messages.size(); ++s)
    steps.push_back(send_step(s, messages[s], pending_req[s]));
  failpoint("ps.push.sent");
  steps_push = std::move(messages);
  stepping = true;
}

void ps_client::impl::await_steps(gpu::param_store* m, std::vector<bool>& seen) {
  // Hand the handles over first: a failure below must not leave them.
  auto waiting = std::move(steps);
  auto pushed = std::move(steps_push);
  auto asked = std::move(pending_req);
  steps.clear();
  steps_push.clear();
  pending_req.clear();
  pending_shard.clear();
  stepping = false;
  pulling = false;
  for (uint32_t s = 0; s < waiting.size(); ++s)
    await(
      s, waiting[s], [&] { return send_step(s, pushed[s], asked[s]); },
      [&](const ps_push_ack& ack, ps_params& p) {
        note_ack(s, ack);
        if (m != nullptr)
          take_params(*m, s, p, seen);
      });
}

// The acknowledgements of the outstanding push. Of a push in parts only
// the part that completed it carries the staleness (the others say 0): a
// shard's staleness is the largest of its parts'.
void ps_client::impl::collect_acks(push_result& result) {
  if (stepping) { // no pull_wait took them: the parameters are dropped
    std::vector<bool> seen(shards.size(), false);
    await_steps(nullptr, seen);
  }
  if (pushes.empty() && !any_acked)
    return;
  auto waiting = std::move(pushes);
  auto sent = std::move(pushes_req);
  auto of = std::move(pushes_shard);
  pushes.clear();
  pushes_req.clear();
  pushes_shard.clear();
  // Those that came with step answers first.
  auto per_shard = std::move(acked);
  per_shard.resize(shards.size(), 0);
  acked.clear();
  if (any_acked) {
    any_acked = false;
    result.acknowledged = true;
    for (auto x : per_shard)
      result.staleness_max = std::max(result.staleness_max, x);
  }
  for (size_t i = 0; i < waiting.size(); ++i)
    await(
      of[i], waiting[i],
      [&] {
        return self->request(shard(of[i]), awaited, ps_push_atom::value,
                             sent[i]);
      },
      [&](const ps_push_ack& ack) {
        per_shard[of[i]] = std::max(per_shard[of[i]], ack.staleness);
        result.staleness_max = std::max(result.staleness_max, ack.staleness);
        result.acknowledged = true;
      });
  uint64_t sum = 0;
  for (auto x : per_shard)
    sum += x;
  result.staleness_mean = static_cast<double>(sum) / shards.size();
  failpoint("ps.push.acked");
}

} // namespace af
