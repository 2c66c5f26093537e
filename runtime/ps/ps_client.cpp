// ps_client: construction, join/pause/leave, pull and wait. Push is in
// ps_client_push.cpp, what happens when a shard is lost in
// ps_client_recovery.cpp.
#include "actorflow/runtime/ps/ps_client.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "actorflow/runtime/core/census.hpp"
#include "actorflow/runtime/ps/detail/ps_client_impl.hpp"

namespace af {

ps_client::impl::impl(caf::actor_system& s, std::vector<caf::actor> sh,
                      std::vector<gpu::param_spec> ps, uint32_t w, caf::actor c)
  : sys(s), shards(std::move(sh)), params(std::move(ps)), worker(w),
    coordinator(caf::actor_cast<coordinator_actor>(std::move(c))), self(s) {
  census_add(caf::actor_cast<caf::actor>(self),
             "PS client of worker " + std::to_string(worker));
  read_version.assign(shards.size(), 0);
  down.assign(shards.size(), false);
  gone.assign(shards.size(), false);
  for (auto& shard : shards)
    self->monitor(shard);
  if (coordinator) {
    self->monitor(coordinator);
    self->send(coordinator, ps_watch_atom::value);
  }
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].sparse)
      sparse = static_cast<int>(i);
  residual.resize(params.size());
  auto k = static_cast<uint32_t>(shards.size());
  line_base.assign(k, std::vector<uint64_t>(params.size(), 0));
  line_size.assign(k, 0);
  for (uint32_t s = 0; s < k; ++s)
    for (size_t i = 0; i < params.size(); ++i) {
      if (params[i].sparse)
        continue;
      auto r = ps_dense_slice(static_cast<uint64_t>(params[i].size()), s, k);
      line_base[s][i] = line_size[s];
      line_size[s] += r.hi - r.lo;
    }
}

ps_client::ps_client(caf::actor_system& sys, std::vector<caf::actor> shards,
                     std::vector<gpu::param_spec> params, uint32_t worker,
                     caf::actor coordinator)
  : impl_(std::make_unique<impl>(sys, std::move(shards), std::move(params),
                                 worker, std::move(coordinator))) {
  if (impl_->shards.empty())
    throw std::invalid_argument("the job has no parameter-server shards");
}

ps_client::~ps_client() = default;

ps_client::joined ps_client::join() {
  auto& d = *impl_;
  joined j;
  if (d.worker != ps_observer)
    d.ask_each(ps_clock_atom::value,
               [&](size_t, uint64_t c) { j.own = std::max(j.own, c); });
  d.ask_each(ps_register_atom::value,
             [&](size_t s, uint64_t version) { d.read_version[s] = version; });
  if (d.worker != ps_observer)
    d.ask_each(ps_clock_atom::value,
               [&](size_t, uint64_t c) { j.clock = std::max(j.clock, c); });
  d.clock = std::max(d.clock, j.clock);
  return j;
}

void ps_client::leave() {
  flush();
  impl_->ask_each(ps_done_atom::value, [](size_t, uint64_t) {});
}

void ps_client::pause() {
  flush();
  impl_->ask_each(ps_pause_atom::value, [](size_t, uint64_t) {});
}

// --- pull --------------------------------------------------------------

void ps_client::impl::plan_pull(uint64_t clock,
                                const std::vector<int64_t>& rows) {
  auto k = static_cast<uint32_t>(shards.size());
  std::vector<ps_pull> requests(k);
  for (uint32_t s = 0; s < k; ++s) {
    requests[s].worker = worker;
    requests[s].clock = clock;
  }
  if (sparse >= 0) {
    std::vector<std::vector<int64_t>> owned(k);
    for (auto r : rows)
      owned[ps_row_shard(r, k)].push_back(r);
    for (uint32_t s = 0; s < k; ++s) {
      ps_slice want;
      want.var = static_cast<uint32_t>(sparse);
      want.index =
        tensor::allocate(dtype::i64, {static_cast<int64_t>(owned[s].size())});
      if (!owned[s].empty())
        std::memcpy(want.index.mutable_data(), owned[s].data(),
                    owned[s].size() * sizeof(int64_t));
      requests[s].rows.push_back(std::move(want));
    }
    pending_rows = rows;
  }
  // Large slices in parts, part p of every shard before part p + 1 of
  // any; sparse rows go with part 0.
  std::vector<uint32_t> parts(k);
  uint32_t most = 0;
  for (uint32_t s = 0; s < k; ++s) {
    parts[s] = parts_of(s);
    most = std::max(most, parts[s]);
  }
  pending.clear();
  pending_req.clear();
  pending_shard.clear();
  for (uint32_t p = 0; p < most; ++p)
    for (uint32_t s = 0; s < k; ++s) {
      if (p >= parts[s])
        continue;
      auto req = p == 0 ? requests[s] : ps_pull{};
      req.worker = worker;
      req.clock = clock;
      req.part = p;
      req.parts = parts[s];
      pending_req.push_back(std::move(req));
      pending_shard.push_back(s);
    }
}

void ps_client::pull_async(uint64_t clock, const std::vector<int64_t>& rows) {
  auto& d = *impl_;
  if (d.pulling)
    throw std::logic_error("ps_client: a pull is already outstanding");
  d.pull_begin = std::chrono::steady_clock::now();
  d.plan_pull(clock, rows);
  d.start_pull();
  d.pulling = true;
}

void ps_client::impl::start_pull() {
  auto first = window == 0 ? pending_req.size()
                           : std::min(pending_req.size(),
                                      std::max(window, shards.size()));
  pending.reserve(pending_req.size());
  for (size_t i = 0; i < first; ++i)
    send_pull(i);
}

double ps_client::pull(gpu::param_store& m, uint64_t clock,
                       const std::vector<int64_t>& rows) {
  pull_async(clock, rows);
  return pull_wait(m);
}

void ps_client::impl::take_params(gpu::param_store& m, uint32_t s, ps_params& p,
                                  std::vector<bool>& seen) {
  if (remote(s))
    network_bytes += bytes_of(p.slices);
  // A pull in parts read the version of its oldest part.
  read_version[s] = seen[s] ? std::min(read_version[s], p.version) : p.version;
  seen[s] = true;
  for (auto& sl : p.slices) {
    if (sl.var >= params.size())
      throw std::runtime_error("parameter server sent an unknown variable");
    auto& spec = params[sl.var];
    sl.values = widen_values(sl.values); // 16 bits on the wire: f32 again
    if (spec.sparse) {
      auto dim = static_cast<size_t>(spec.row_size());
      auto* ids = sl.index.data_as<int64_t>();
      auto* vals = sl.values.data_as<float>();
      for (int64_t r = 0; r < sl.index.elements(); ++r) {
        auto it = local.find(ids[r]);
        if (it == local.end())
          continue;
        std::memcpy(host.data() + static_cast<size_t>(it->second) * dim,
                    vals + static_cast<size_t>(r) * dim, dim * sizeof(float));
      }
    } else {
      auto n = static_cast<uint64_t>(sl.values.elements());
      if (sl.offset + n > static_cast<uint64_t>(spec.size()))
        throw std::runtime_error("parameter server sent a slice outside "
                                 "variable "
                                 + spec.name);
      m.dev().upload(m.value(sl.var).f32() + sl.offset, sl.values.data(),
                     n * sizeof(float));
    }
  }
}

double ps_client::pull_wait(gpu::param_store& m) {
  auto& d = *impl_;
  auto k = static_cast<uint32_t>(d.shards.size());
  if (!d.pulling)
    throw std::logic_error("ps_client: no pull is outstanding");
  std::vector<bool> seen(k, false);
  if (d.sparse >= 0) {
    auto& rows = d.pending_rows;
    d.local.clear();
    for (size_t j = 0; j < rows.size(); ++j)
      d.local.emplace(rows[j], static_cast<int32_t>(j));
    m.set_local_rows(static_cast<size_t>(d.sparse),
                     static_cast<int64_t>(rows.size()));
    d.host.assign(
      rows.size() * static_cast<size_t>(d.params[d.sparse].row_size()), 0.0f);
  }
  if (d.stepping) // the pull went with the last push (push_then_pull)
    d.await_steps(&m, seen);
  else
    d.await_pull(m, seen);
  if (d.sparse >= 0)
    m.dev().upload(m.value(static_cast<size_t>(d.sparse)).get(), d.host.data(),
                   d.host.size() * sizeof(float));
  return std::chrono::duration<double>(std::chrono::steady_clock::now()
                                       - d.pull_begin)
    .count();
}

void ps_client::impl::await_pull(gpu::param_store& m, std::vector<bool>& seen) {
  // Hand the handles over first: a failure below must not leave them.
  auto sent = std::move(pending);
  auto asked = std::move(pending_req);
  auto of = std::move(pending_shard);
  pending.clear();
  pending_req.clear();
  pending_shard.clear();
  pulling = false;
  auto ask = [&](size_t i) {
    return self->request(shard(of[i]), awaited, ps_pull_atom::value,
                         asked[i]);
  };
  for (size_t i = 0; i < asked.size(); ++i) {
    auto s = of[i];
    if (i >= sent.size()) // (the window is at least 1)
      sent.push_back(ask(i));
    await(
      s, sent[i], [&] { return ask(i); },
      [&](ps_params& p) { take_params(m, s, p, seen); });
    // Keep the window full: one more part out for each that came in.
    if (sent.size() < asked.size())
      sent.push_back(ask(sent.size()));
  }
}

// --- the rest ------------------------------------------------------------

bool ps_client::push_unacknowledged() const noexcept {
  return !impl_->pushes.empty() || impl_->stepping;
}

uint64_t ps_client::network_bytes() const noexcept {
  return impl_->network_bytes;
}

uint64_t ps_client::read_version() const noexcept {
  return impl_->read_version.empty() ? 0 : impl_->read_version[0];
}

void ps_client::set_wire(dtype wire) {
  if (wire != dtype::f32 && wire != dtype::bf16 && wire != dtype::f16)
    throw std::invalid_argument(std::string{"ps_client: no wire dtype "}
                                + dtype_name(wire));
  impl_->wire = wire;
}

void ps_client::set_part_bytes(size_t bytes, size_t window) {
  impl_->part_bytes = bytes;
  impl_->window = window;
}

ps_client::push_result ps_client::flush() {
  push_result result;
  impl_->collect_acks(result);
  return result;
}

ps_progress ps_client::wait(uint64_t steps) {
  auto& d = *impl_;
  ps_progress result;
  auto ask = [&] {
    return d.self->request(d.shard(0), impl::awaited, ps_wait_atom::value,
                           steps);
  };
  auto h = ask();
  d.await(0, h, ask, [&](const ps_progress& p) { result = p; });
  return result;
}

} // namespace af
