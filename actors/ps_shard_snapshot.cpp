// ps_shard_state: the snapshot codec - its byte writer and reader, and
// snapshot() and restore() (format: actors/ps_shard.hpp).
#include "actors/ps_shard_state_impl.hpp"

#include <algorithm>
#include <bit>
#include <stdexcept>
#include <string_view>

#include "gpu/layers.hpp"
#include "runtime/crc32c.hpp"

namespace af {

namespace ps_detail {

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

} // namespace ps_detail

namespace {

using ps_detail::byte_writer;
using ps_detail::update;
using ps_detail::var_grad;
using ps_detail::variable;

static_assert(std::endian::native == std::endian::little,
              "snapshots copy little-endian integers and floats as bytes");

constexpr char snapshot_magic[8] = {'A', 'F', 'P', 'S', 'S', 'N', 'A', 'P'};
constexpr uint32_t snapshot_version = 1;

void put_stats(byte_writer& w, const ps_shard_stats& stats) {
  for (auto x : {stats.pushes, stats.duplicates, stats.skipped,
                 stats.staleness_sum, stats.staleness_max, stats.delayed_pulls,
                 stats.rows, stats.workers_lost})
    w.u64(x);
}

void put_variable(byte_writer& w, const variable& v) {
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

void put_clock(byte_writer& w, uint64_t step, const update& u) {
  w.u64(step);
  w.u64(u.samples);
  w.u64(u.pushes);
  w.u64(u.staleness);
  auto used = [](const var_grad& a) {
    return a.has_first || a.has_dense || !a.elements.empty() || !a.rows.empty();
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

} // namespace

std::string ps_shard_state::impl::snapshot() const {
  byte_writer w;
  w.raw(snapshot_magic, sizeof snapshot_magic);
  w.u32(snapshot_version);
  w.u32(cfg.shard);
  w.u32(cfg.shards);
  w.str(cfg.optimizer.type);
  w.u64(version);
  put_stats(w, stats);
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

void ps_shard_state::impl::check_row(byte_reader& r, uint32_t var,
                                     int64_t row) const {
  auto& v = vars[var];
  if (row < 0 || row >= v.rows || ps_row_shard(row, cfg.shards) != cfg.shard)
    r.fail(describe(var) + ": row " + std::to_string(row)
           + (row < 0 || row >= v.rows ? " is out of range"
                                       : " belongs to another shard"));
}

ps_shard_state::impl::variable
ps_shard_state::impl::get_variable(byte_reader& r, uint32_t i) const {
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
           + gpu::shape_string(shape) + " in the snapshot, "
           + (spec.sparse ? "sparse " : "dense ")
           + gpu::shape_string(spec.shape) + " in the model");
  variable v{spec, sparse ? gpu::optimizer_state::rows(cfg.optimizer, mine.dim)
                          : gpu::optimizer_state::dense(cfg.optimizer,
                                                        mine.hi - mine.lo)};
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

std::pair<uint64_t, ps_shard_state::impl::update>
ps_shard_state::impl::get_clock(byte_reader& r) const {
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

void ps_shard_state::impl::restore(const std::string& bytes) {
  if (bytes.size() < sizeof snapshot_magic + 8
      || std::memcmp(bytes.data(), snapshot_magic, sizeof snapshot_magic) != 0)
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
    r.fail("optimizer \"" + type + "\" in the snapshot, \"" + cfg.optimizer.type
           + "\" configured");
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

} // namespace af
