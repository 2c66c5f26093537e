// ps_shard_state: the shard's state machine (actors/ps_shard/ps_shard.hpp) - its
// public calls, the config check, and the workers' clocks. Pulls, pushes,
// pushes in parts and snapshots are in the files
// ps_shard_state_impl.hpp names.
#include "actorflow/actors/ps_shard/detail/ps_shard_state_impl.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "actorflow/gpu/layers.hpp"

namespace af {

namespace {

constexpr uint64_t no_clock = std::numeric_limits<uint64_t>::max();

} // namespace

using detail::pending_pull;

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
      return "variable \"" + p.name + "\" has shape "
             + gpu::shape_string(p.shape)
             + (p.sparse ? " (sparse variables need [rows, dim], dim > 0)"
                         : "");
  }
  return {};
}

ps_shard_state::impl::impl(ps_shard_config c) : cfg(std::move(c)) {
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

std::string ps_shard_state::impl::describe(uint32_t var) const {
  return "variable " + std::to_string(var) + " \"" + vars[var].spec.name + "\"";
}

uint64_t ps_shard_state::impl::missing() const {
  return cfg.expected_workers > workers.size()
           ? cfg.expected_workers - workers.size()
           : 0;
}

uint64_t ps_shard_state::impl::min_clock() const {
  if (missing() > 0)
    return 0;
  uint64_t m = no_clock;
  for (auto& [id, w] : workers)
    if (w.live && !w.paused)
      m = std::min(m, w.clock);
  return m;
}

bool ps_shard_state::impl::finished() const {
  size_t left = 0;
  for (auto& [id, w] : workers) {
    if (w.live)
      return false;
    ++left;
  }
  return left >= std::max<size_t>(1, cfg.expected_workers);
}

bool ps_shard_state::impl::can_answer(const ps_pull& req) const {
  if (req.worker == ps_observer || !cfg.staleness)
    return true;
  auto m = min_clock();
  return req.clock <= m || req.clock - m <= *cfg.staleness;
}

ps_shard_state::impl::worker_info& ps_shard_state::impl::join(uint32_t worker) {
  auto& w = workers[worker];
  w.live = true;
  w.paused = false;
  return w;
}

void ps_shard_state::impl::apply_completed_clocks() {
  if (!synchronous())
    return;
  auto m = min_clock();
  while (!clocks.empty() && clocks.begin()->first <= m) {
    apply(clocks.begin()->second);
    clocks.erase(clocks.begin());
  }
}

// --- the public calls -------------------------------------------------------

ps_shard_state::ps_shard_state(ps_shard_config cfg)
  : impl_(std::make_unique<impl>(std::move(cfg))) {
}

ps_shard_state::~ps_shard_state() = default;

const ps_shard_config& ps_shard_state::config() const noexcept {
  return impl_->cfg;
}

uint64_t ps_shard_state::register_worker(uint32_t worker, uint64_t clock,
                                         bool catch_up) {
  auto& st = *impl_;
  if (worker != ps_observer) {
    auto it = st.workers.find(worker);
    if (catch_up && (it == st.workers.end() || !it->second.live)) {
      // Back after it left, or new after every expected worker came: at
      // the slowest live worker's clock, so that the others, who went on
      // without it, are not held back (while an expected worker is
      // missing, that is 0).
      auto m = st.min_clock();
      if (m != no_clock)
        clock = std::max(clock, m);
    }
    auto& w = st.join(worker);
    w.clock = std::max(w.clock, clock);
    st.apply_completed_clocks();
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
  st.apply_completed_clocks();
  return st.version;
}

uint64_t ps_shard_state::pause(uint32_t worker) {
  auto& st = *impl_;
  auto it = st.workers.find(worker);
  if (worker == ps_observer || it == st.workers.end() || !it->second.live
      || it->second.paused)
    return st.version;
  it->second.paused = true;
  st.apply_completed_clocks();
  return st.version;
}

uint64_t ps_shard_state::clock_of(uint32_t worker) const {
  auto it = impl_->workers.find(worker);
  return it == impl_->workers.end() ? 0 : it->second.clock;
}

bool ps_shard_state::knows(uint32_t worker) const {
  return impl_->workers.count(worker) > 0;
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
} // namespace af
