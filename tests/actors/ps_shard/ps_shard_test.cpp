// Parameter-server shards through their actors: consistency (tau = 0, k,
// unbounded), retries, lost workers, staleness, lazy rows, validation and
// ps_wait. Workers are scoped actors driven from the test thread.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include "actorflow/actors/ps_shard/ps_shard.hpp"
#include "actorflow/runtime/core/wire_dtype.hpp"
#include "tests/support/harness.hpp"

using namespace af;
using namespace std::chrono_literals;

namespace {

constexpr int64_t table_rows = 40;
constexpr int64_t dim = 3;

// Variable 0: a dense [3, 4] kernel; variable 1: a sparse [40, 3] table.
std::vector<gpu::param_spec> model_params() {
  gpu::param_spec kernel;
  kernel.name = "0_dense/kernel";
  kernel.shape = {3, 4};
  kernel.init_limit = 0.5f;
  gpu::param_spec table;
  table.name = "1_embedding/table";
  table.shape = {table_rows, dim};
  table.sparse = true;
  table.init_limit = 0.3f;
  return {kernel, table};
}

ps_shard_config shard_config(uint32_t shard, uint32_t shards,
                             std::optional<uint64_t> tau,
                             const char* optimizer = "sgd",
                             uint32_t expected = 0) {
  ps_shard_config c;
  c.shard = shard;
  c.shards = shards;
  c.params = model_params();
  c.optimizer.type = optimizer;
  c.optimizer.learning_rate = optimizer == std::string{"adam"} ? 0.05 : 0.1;
  c.staleness = tau;
  c.expected_workers = expected;
  c.seed = 42;
  c.name = "ps[" + std::to_string(shard) + "]";
  return c;
}

struct ps_fixture {
  test::config cfg;
  caf::actor_system sys{cfg};
  std::vector<caf::actor> shards;

  caf::actor spawn(ps_shard_config c) {
    shards.push_back(spawn_ps_shard(sys, std::move(c)));
    return shards.back();
  }

  ~ps_fixture() {
    for (auto& s : shards)
      caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
  }
};

tensor f32(const std::vector<float>& v, std::vector<int64_t> shape = {}) {
  if (shape.empty())
    shape = {static_cast<int64_t>(v.size())};
  auto t = tensor::allocate(dtype::f32, shape);
  std::copy(v.begin(), v.end(), t.mutable_data_as<float>());
  return t;
}

tensor i64(const std::vector<int64_t>& v) {
  auto t = tensor::allocate(dtype::i64, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.mutable_data_as<int64_t>());
  return t;
}

std::vector<float> floats(const tensor& t) {
  auto* p = t.data_as<float>();
  return std::vector<float>(p, p + t.elements());
}

ps_slice dense_grad(uint32_t var, uint64_t offset, std::vector<float> v) {
  ps_slice s;
  s.var = var;
  s.offset = offset;
  s.values = f32(v);
  return s;
}

ps_slice rows_slice(uint32_t var, const std::vector<int64_t>& rows,
                    const std::vector<float>& v = {}) {
  ps_slice s;
  s.var = var;
  s.index = i64(rows);
  auto r = static_cast<int64_t>(rows.size());
  if (!v.empty()) // [rows, dim] when the count fits, else flat
    s.values =
      static_cast<int64_t>(v.size()) == r * dim ? f32(v, {r, dim}) : f32(v);
  return s;
}

ps_push make_push(uint32_t worker, uint64_t step, uint64_t read_version,
                  uint64_t samples, std::vector<ps_slice> grads) {
  ps_push p;
  p.worker = worker;
  p.step = step;
  p.read_version = read_version;
  p.samples = samples;
  p.grads = std::move(grads);
  return p;
}

ps_pull make_pull(uint32_t worker, uint64_t clock,
                  std::vector<ps_slice> rows = {}) {
  ps_pull p;
  p.worker = worker;
  p.clock = clock;
  p.rows = std::move(rows);
  return p;
}

// A request answered within 10 s; REQUIREs an answer of type T.
template <class T, class... Ts>
T ask(caf::scoped_actor& self, const caf::actor& to, Ts&&... xs) {
  std::optional<T> out;
  std::string err;
  self->request(to, 10s, std::forward<Ts>(xs)...)
    .receive([&](T& x) { out = std::move(x); },
             [&](caf::error& e) { err = self->system().render(e); });
  INFO(err);
  REQUIRE(out);
  return std::move(*out);
}

// A request that must fail (T: its answer otherwise); returns the rendered
// error.
template <class T, class... Ts>
std::string ask_error(caf::scoped_actor& self, const caf::actor& to,
                      Ts&&... xs) {
  std::string err;
  bool answered = false;
  self->request(to, 10s, std::forward<Ts>(xs)...)
    .receive([&](T&) { answered = true; },
             [&](caf::error& e) { err = self->system().render(e); });
  CHECK_FALSE(answered);
  REQUIRE_FALSE(err.empty());
  return err;
}

// The answer to a message sent earlier with send(), or nullopt when none
// came within `wait`.
template <class T>
std::optional<T> answer_within(caf::scoped_actor& self,
                               std::chrono::milliseconds wait) {
  std::optional<T> out;
  std::string err;
  self->receive([&](T& x) { out = std::move(x); },
                [&](caf::error& e) { err = self->system().render(e); },
                caf::after(wait) >> [] {});
  INFO(err);
  REQUIRE(err.empty());
  return out;
}

const ps_slice& slice_of(const ps_params& p, uint32_t var) {
  for (auto& s : p.slices)
    if (s.var == var)
      return s;
  FAIL("no slice of variable " << var);
  return p.slices.front();
}

std::vector<int64_t> owned_rows(uint32_t shard, uint32_t shards) {
  std::vector<int64_t> out;
  for (int64_t r = 0; r < table_rows; ++r)
    if (ps_row_shard(r, shards) == shard)
      out.push_back(r);
  return out;
}

// One worker's summed gradients of a step, for the whole model.
struct full_grad {
  std::vector<float> dense = std::vector<float>(12, 0.0f);
  std::map<int64_t, std::vector<float>> rows;
  uint64_t samples = 0;
};

full_grad gradient_of(int worker, int clock) {
  full_grad g;
  for (int i = 0; i < 12; ++i)
    g.dense[i] = 0.3f * static_cast<float>(worker + 1) * (i % 5 - 2)
                 + 0.05f * static_cast<float>(clock);
  // Rows 1 and 7 both workers touch; the others one of them.
  for (int64_t r : {int64_t{1}, int64_t{7}, int64_t{10 + 3 * clock + worker}})
    for (int j = 0; j < dim; ++j)
      g.rows[r].push_back(0.2f * static_cast<float>(worker + 1) - 0.1f * j
                          + 0.01f * static_cast<float>(clock * r));
  g.samples = static_cast<uint64_t>(4 + worker);
  return g;
}

full_grad sum_of(const full_grad& a, const full_grad& b) {
  full_grad s = a;
  for (size_t i = 0; i < s.dense.size(); ++i)
    s.dense[i] += b.dense[i];
  for (auto& [r, v] : b.rows) {
    auto& dst = s.rows[r];
    dst.resize(dim, 0.0f);
    for (int j = 0; j < dim; ++j)
      dst[j] += v[j];
  }
  s.samples += b.samples;
  return s;
}

// The part of `g` that shard `shard` owns.
std::vector<ps_slice> grads_for(const full_grad& g, uint32_t shard,
                                uint32_t shards) {
  auto r = ps_dense_slice(12, shard, shards);
  std::vector<ps_slice> out;
  out.push_back(dense_grad(
    0, r.lo,
    std::vector<float>(g.dense.begin() + r.lo, g.dense.begin() + r.hi)));
  std::vector<int64_t> ids;
  std::vector<float> vals;
  for (auto& [row, v] : g.rows)
    if (ps_row_shard(row, shards) == shard) {
      ids.push_back(row);
      vals.insert(vals.end(), v.begin(), v.end());
    }
  if (!ids.empty())
    out.push_back(rows_slice(1, ids, vals));
  return out;
}

std::vector<int64_t> rows_for(const full_grad& g, uint32_t shard,
                              uint32_t shards) {
  std::vector<int64_t> out;
  for (auto& [row, v] : g.rows)
    if (ps_row_shard(row, shards) == shard)
      out.push_back(row);
  return out;
}

// Every value of the model as the shards hold it: the dense kernel, then
// every row of the table.
std::vector<float> snapshot(caf::scoped_actor& self,
                            const std::vector<caf::actor>& shards) {
  std::vector<float> dense(12);
  std::vector<float> table(table_rows * dim);
  auto n = static_cast<uint32_t>(shards.size());
  for (uint32_t s = 0; s < n; ++s) {
    auto rows = owned_rows(s, n);
    auto p = ask<ps_params>(self, shards[s], ps_pull_atom::value,
                            make_pull(ps_observer, 0, {rows_slice(1, rows)}));
    auto& d = slice_of(p, 0);
    auto v = floats(d.values);
    std::copy(v.begin(), v.end(), dense.begin() + d.offset);
    auto t = floats(slice_of(p, 1).values);
    for (size_t j = 0; j < rows.size(); ++j)
      std::copy(t.begin() + j * dim, t.begin() + (j + 1) * dim,
                table.begin() + rows[j] * dim);
  }
  dense.insert(dense.end(), table.begin(), table.end());
  return dense;
}

} // namespace

TEST_CASE("tau 0 with two workers equals one worker on the concatenated "
          "batch",
          "[ps]") {
  ps_fixture two;
  ps_fixture one;
  const uint32_t n = 2;
  std::vector<caf::actor> a;
  std::vector<caf::actor> b;
  for (uint32_t s = 0; s < n; ++s) {
    a.push_back(two.spawn(shard_config(s, n, 0, "adam", 2)));
    b.push_back(one.spawn(shard_config(s, n, 0, "adam", 1)));
  }
  caf::scoped_actor w0{two.sys};
  caf::scoped_actor w1{two.sys};
  caf::scoped_actor solo{one.sys};
  auto initial = snapshot(w0, a);
  REQUIRE(initial == snapshot(solo, b));
  for (uint32_t s = 0; s < n; ++s) {
    ask<uint64_t>(w0, a[s], ps_register_atom::value, uint32_t{0});
    ask<uint64_t>(w1, a[s], ps_register_atom::value, uint32_t{1});
    ask<uint64_t>(solo, b[s], ps_register_atom::value, uint32_t{0});
  }
  for (int clock = 1; clock <= 3; ++clock) {
    auto g0 = gradient_of(0, clock);
    auto g1 = gradient_of(1, clock);
    auto both = sum_of(g0, g1);
    auto step = static_cast<uint64_t>(clock);
    for (uint32_t s = 0; s < n; ++s) {
      // Pulls at the previous clock are answered: every worker is there.
      auto p0 = ask<ps_params>(
        w0, a[s], ps_pull_atom::value,
        make_pull(0, step - 1, {rows_slice(1, rows_for(g0, s, n))}));
      auto p1 = ask<ps_params>(
        w1, a[s], ps_pull_atom::value,
        make_pull(1, step - 1, {rows_slice(1, rows_for(g1, s, n))}));
      auto pb = ask<ps_params>(
        solo, b[s], ps_pull_atom::value,
        make_pull(0, step - 1, {rows_slice(1, rows_for(both, s, n))}));
      CHECK(p0.version == step - 1);
      CHECK(p1.version == step - 1);
      CHECK(pb.version == step - 1);
      auto ack0 = ask<ps_push_ack>(
        w0, a[s], ps_push_atom::value,
        make_push(0, step, p0.version, g0.samples, grads_for(g0, s, n)));
      CHECK(ack0.applied);
      CHECK(ack0.version == step - 1); // waits for worker 1
      auto ack1 = ask<ps_push_ack>(
        w1, a[s], ps_push_atom::value,
        make_push(1, step, p1.version, g1.samples, grads_for(g1, s, n)));
      CHECK(ack1.version == step); // the clock's update is in
      auto ackb = ask<ps_push_ack>(
        solo, b[s], ps_push_atom::value,
        make_push(0, step, pb.version, both.samples, grads_for(both, s, n)));
      CHECK(ackb.version == step);
    }
  }
  auto x = snapshot(w0, a);
  auto y = snapshot(solo, b);
  REQUIRE(x.size() == y.size());
  CHECK(x != initial);
  for (size_t i = 0; i < x.size(); ++i) {
    INFO("value " << i);
    CHECK(x[i] == Approx(y[i]).epsilon(1e-5).margin(1e-6));
  }
  for (uint32_t s = 0; s < n; ++s) {
    auto st = ask<ps_shard_stats>(w0, a[s], ps_stats_atom::value);
    CHECK(st.version == 3);
    CHECK(st.pushes == 6);
    CHECK(st.staleness_max == 0);
    CHECK(st.delayed_pulls == 0);
  }
}

TEST_CASE("tau k blocks a pull k plus 1 clocks ahead until the slowest "
          "pushes",
          "[ps]") {
  ps_fixture f;
  auto shard = f.spawn(shard_config(0, 1, 2));
  caf::scoped_actor fast{f.sys};
  caf::scoped_actor slow{f.sys};
  ask<uint64_t>(fast, shard, ps_register_atom::value, uint32_t{0});
  ask<uint64_t>(slow, shard, ps_register_atom::value, uint32_t{1});
  for (uint64_t step = 1; step <= 3; ++step)
    CHECK(ask<ps_push_ack>(fast, shard, ps_push_atom::value,
                           make_push(0, step, step - 1, 1, {}))
            .applied);
  // Two clocks ahead of the slowest (at 0) is within the bound.
  auto ok = ask<ps_params>(fast, shard, ps_pull_atom::value, make_pull(0, 2));
  CHECK(ok.version == 3);
  // Three is not: the pull waits.
  fast->send(shard, ps_pull_atom::value, make_pull(0, 3));
  CHECK_FALSE(answer_within<ps_params>(fast, 200ms));
  // The evaluator is never held back.
  ask<ps_params>(slow, shard, ps_pull_atom::value, make_pull(ps_observer, 99));
  ask<ps_push_ack>(slow, shard, ps_push_atom::value, make_push(1, 1, 0, 1, {}));
  auto released = answer_within<ps_params>(fast, 5s);
  REQUIRE(released);
  CHECK(released->version == 4);
  auto st = ask<ps_shard_stats>(slow, shard, ps_stats_atom::value);
  CHECK(st.delayed_pulls == 1);
}

TEST_CASE("unbounded staleness never blocks a pull", "[ps]") {
  ps_fixture f;
  auto shard = f.spawn(shard_config(0, 1, std::nullopt, "sgd", 2));
  caf::scoped_actor fast{f.sys};
  caf::scoped_actor slow{f.sys};
  ask<uint64_t>(fast, shard, ps_register_atom::value, uint32_t{0});
  ask<uint64_t>(slow, shard, ps_register_atom::value, uint32_t{1});
  for (uint64_t step = 1; step <= 10; ++step) {
    auto p =
      ask<ps_params>(fast, shard, ps_pull_atom::value, make_pull(0, step - 1));
    CHECK(p.version == step - 1);
    ask<ps_push_ack>(fast, shard, ps_push_atom::value,
                     make_push(0, step, p.version, 1, {}));
  }
  auto p = ask<ps_params>(fast, shard, ps_pull_atom::value, make_pull(0, 10));
  CHECK(p.version == 10);
  CHECK(ask<ps_shard_stats>(slow, shard, ps_stats_atom::value).delayed_pulls
        == 0);
}

TEST_CASE("a duplicate push is acknowledged but applied once", "[ps]") {
  ps_fixture f;
  auto shard = f.spawn(shard_config(0, 1, std::nullopt));
  caf::scoped_actor w{f.sys};
  auto push =
    make_push(0, 1, 0, 2, {dense_grad(0, 0, std::vector<float>(12, 1.0f))});
  auto first = ask<ps_push_ack>(w, shard, ps_push_atom::value, push);
  CHECK(first.applied);
  CHECK(first.version == 1);
  auto before = snapshot(w, {shard});
  auto again = ask<ps_push_ack>(w, shard, ps_push_atom::value, push);
  CHECK_FALSE(again.applied);
  CHECK(again.version == 1);
  CHECK(snapshot(w, {shard}) == before);
  auto st = ask<ps_shard_stats>(w, shard, ps_stats_atom::value);
  CHECK(st.pushes == 1);
  CHECK(st.duplicates == 1);
  CHECK(st.version == 1);
  // An older step is a retry too.
  ask<ps_push_ack>(w, shard, ps_push_atom::value, make_push(0, 2, 1, 1, {}));
  CHECK_FALSE(ask<ps_push_ack>(w, shard, ps_push_atom::value, push).applied);
}

TEST_CASE("a push with the next pull (ps_step) is the push, then the pull, "
          "in one request",
          "[ps]") {
  ps_fixture f;
  // tau 0, two workers: a step's pull waits like any pull.
  auto shard = f.spawn(shard_config(0, 1, 0, "sgd", 2));
  auto twin = f.spawn(shard_config(0, 1, 0, "sgd", 2));
  caf::scoped_actor w{f.sys};
  caf::scoped_actor other{f.sys};
  for (auto& s : {shard, twin}) {
    ask<uint64_t>(w, s, ps_register_atom::value, uint32_t{0});
    ask<uint64_t>(other, s, ps_register_atom::value, uint32_t{1});
  }
  auto push =
    make_push(0, 1, 0, 2, {dense_grad(0, 0, std::vector<float>(12, 1.0f))});
  auto mine = owned_rows(0, 1);
  auto pull = make_pull(0, 1, {rows_slice(1, {mine[0], mine[1]})});
  // The step's answer waits for worker 1's clock; the twin gets the two
  // messages, and their answers are what the step's are.
  w->send(shard, ps_step_atom::value, push, pull);
  std::optional<ps_push_ack> ack;
  std::optional<ps_params> params;
  w->receive([&](ps_push_ack& a, ps_params& p) { ack = a, params = p; },
             [&](caf::error& e) { FAIL(w->system().render(e)); },
             caf::after(200ms) >> [] {});
  CHECK_FALSE(params);
  auto twin_ack = ask<ps_push_ack>(w, twin, ps_push_atom::value, push);
  w->send(twin, ps_pull_atom::value, pull);
  CHECK_FALSE(answer_within<ps_params>(w, 200ms));
  for (auto& s : {shard, twin})
    ask<ps_push_ack>(other, s, ps_push_atom::value, make_push(1, 1, 0, 1, {}));
  w->receive([&](ps_push_ack& a, ps_params& p) { ack = a, params = p; },
             [&](caf::error& e) { FAIL(w->system().render(e)); },
             caf::after(5s) >> [] {});
  auto twin_params = answer_within<ps_params>(w, 5s);
  REQUIRE(ack);
  REQUIRE(params);
  REQUIRE(twin_params);
  CHECK(ack->applied == twin_ack.applied);
  CHECK(ack->version == twin_ack.version);
  CHECK(params->version == 1);
  CHECK(params->version == twin_params->version);
  REQUIRE(params->slices.size() == twin_params->slices.size());
  for (size_t i = 0; i < params->slices.size(); ++i) {
    CHECK(params->slices[i].var == twin_params->slices[i].var);
    CHECK(floats(params->slices[i].values)
          == floats(twin_params->slices[i].values));
  }
  CHECK(snapshot(w, {shard}) == snapshot(w, {twin}));
  CHECK(ask<ps_shard_stats>(w, shard, ps_stats_atom::value).delayed_pulls
        == 1);
  // Sent again (a retry), the push is a duplicate and the pull answered.
  caf::scoped_actor again{f.sys};
  again->request(shard, 10s, ps_step_atom::value, push, make_pull(0, 1))
    .receive(
      [&](ps_push_ack& a, ps_params& p) {
        CHECK_FALSE(a.applied);
        CHECK(p.version == 1);
      },
      [&](caf::error& e) { FAIL(again->system().render(e)); });
  // An invalid push: its error, no pull, nothing changed.
  auto before = snapshot(w, {shard});
  std::string err;
  again
    ->request(shard, 10s, ps_step_atom::value,
              make_push(0, 2, 2, 1, {dense_grad(9, 0, {1.0f})}),
              make_pull(0, 2))
    .receive([&](ps_push_ack&, ps_params&) { FAIL("answered"); },
             [&](caf::error& e) { err = again->system().render(e); });
  CHECK_THAT(err, Catch::Contains("unknown variable 9"));
  CHECK(snapshot(w, {shard}) == before);
  // A shard shutting down fails the step that waits for its pull.
  auto waiting = again->request(shard, 10s, ps_step_atom::value,
                                make_push(0, 2, 2, 1, {}), make_pull(0, 2));
  REQUIRE(ask<ps_shard_stats>(other, shard, ps_stats_atom::value).delayed_pulls
          == 2);
  caf::anon_send_exit(shard, caf::exit_reason::user_shutdown);
  err.clear();
  waiting.receive([&](ps_push_ack&, ps_params&) { FAIL("answered"); },
                  [&](caf::error& e) { err = again->system().render(e); });
  CHECK_THAT(err, Catch::Contains("shutting down"));
}

TEST_CASE("a 16-bit wire: pulls answer in it, pushes in it are applied in "
          "f32",
          "[ps]") {
  for (auto wire : {dtype::bf16, dtype::f16}) {
    CAPTURE(dtype_name(wire));
    ps_fixture f;
    auto c16 = shard_config(0, 1, std::nullopt);
    c16.wire = wire;
    auto s16 = f.spawn(c16);
    auto s32 = f.spawn(shard_config(0, 1, std::nullopt));
    caf::scoped_actor w{f.sys};
    auto p16 = ask<ps_params>(w, s16, ps_pull_atom::value,
                              make_pull(0, 0, {rows_slice(1, {3, 7})}));
    auto p32 = ask<ps_params>(w, s32, ps_pull_atom::value,
                              make_pull(0, 0, {rows_slice(1, {3, 7})}));
    REQUIRE(p16.slices.size() == p32.slices.size());
    for (size_t i = 0; i < p16.slices.size(); ++i) {
      // The same values, each rounded to 16 bits: what narrow_values
      // makes of the f32 master values.
      CHECK(p16.slices[i].values.type() == wire);
      CHECK(p16.slices[i].values.shape() == p32.slices[i].values.shape());
      auto want = floats(widen_values(narrow_values(p32.slices[i].values, wire)));
      CHECK(floats(widen_values(p16.slices[i].values)) == want);
      CHECK(want != floats(p32.slices[i].values)); // rounding did something
    }
    // A gradient sent in 16 bits moves the f32 master values as the same
    // (rounded) gradient sent in f32 does: the shard keeps full precision.
    std::vector<float> g(12);
    for (size_t i = 0; i < g.size(); ++i)
      g[i] = 0.1f * static_cast<float>(i) - 0.37f;
    auto rounded = floats(widen_values(narrow_values(f32(g), wire)));
    auto narrow = dense_grad(0, 0, g);
    narrow.values = narrow_values(narrow.values, wire);
    auto sparse = rows_slice(1, {3}, {0.25f, -0.5f, 1.0f});
    sparse.values = narrow_values(sparse.values, wire);
    CHECK(ask<ps_push_ack>(w, s16, ps_push_atom::value,
                           make_push(0, 1, 0, 1, {narrow, sparse}))
            .applied);
    CHECK(ask<ps_push_ack>(w, s32, ps_push_atom::value,
                           make_push(0, 1, 0, 1,
                                     {dense_grad(0, 0, rounded),
                                      rows_slice(1, {3}, {0.25f, -0.5f, 1.0f})}))
            .applied);
    // The master values, as a checkpoint holds them (f32 both).
    CHECK(ask<std::string>(w, s16, ps_snapshot_atom::value)
          == ask<std::string>(w, s32, ps_snapshot_atom::value));
  }
}

TEST_CASE("a worker going down releases a waiting pull and completes the "
          "clock",
          "[ps]") {
  ps_fixture f;
  SECTION("tau 0, a scoped actor destroyed") {
    auto shard = f.spawn(shard_config(0, 1, 0, "sgd", 2));
    caf::scoped_actor w0{f.sys};
    auto initial = snapshot(w0, {shard});
    ask<uint64_t>(w0, shard, ps_register_atom::value, uint32_t{0});
    {
      caf::scoped_actor w1{f.sys};
      ask<uint64_t>(w1, shard, ps_register_atom::value, uint32_t{1});
      auto ack = ask<ps_push_ack>(
        w0, shard, ps_push_atom::value,
        make_push(0, 1, 0, 4,
                  {dense_grad(0, 0, std::vector<float>(12, 2.0f))}));
      CHECK(ack.version == 0); // the clock waits for worker 1
      w0->send(shard, ps_pull_atom::value, make_pull(0, 1));
      CHECK_FALSE(answer_within<ps_params>(w0, 200ms));
    } // worker 1 goes down here
    auto released = answer_within<ps_params>(w0, 5s);
    REQUIRE(released);
    CHECK(released->version == 1);
    // Worker 0's gradient alone: 2 / 4 samples, lr 0.1.
    auto v = floats(slice_of(*released, 0).values);
    for (size_t i = 0; i < 12; ++i)
      CHECK(v[i] == Approx(initial[i] - 0.1 * 2.0 / 4).epsilon(1e-6));
    auto st = ask<ps_shard_stats>(w0, shard, ps_stats_atom::value);
    CHECK(st.workers_lost == 1);
    CHECK(st.pushes == 1);
  }
  SECTION("tau 1, an actor that registers and exits") {
    auto shard = f.spawn(shard_config(0, 1, 1, "sgd", 2));
    caf::scoped_actor w0{f.sys};
    ask<uint64_t>(w0, shard, ps_register_atom::value, uint32_t{0});
    // Spawned with an argument (CAF 0.17 and UBSan: never zero).
    f.sys.spawn(
      [](caf::event_based_actor* self, caf::actor ps) {
        self->request(ps, caf::infinite, ps_register_atom::value, uint32_t{1})
          .then([=](uint64_t) { self->quit(); });
      },
      shard);
    // Worker 1 is counted once it registered; until then it is expected.
    for (uint64_t step = 1; step <= 2; ++step)
      ask<ps_push_ack>(w0, shard, ps_push_atom::value,
                       make_push(0, step, 0, 1, {}));
    w0->send(shard, ps_pull_atom::value, make_pull(0, 2));
    auto released = answer_within<ps_params>(w0, 5s);
    REQUIRE(released);
    CHECK(released->version == 2);
    auto st = ask<ps_shard_stats>(w0, shard, ps_stats_atom::value);
    CHECK(st.workers_lost == 1);
    CHECK(st.delayed_pulls <= 1);
  }
}

TEST_CASE("staleness is measured and scales the learning rate", "[ps]") {
  ps_fixture f;
  auto plain_cfg = shard_config(0, 1, std::nullopt);
  plain_cfg.params[0].init_limit = 0; // zeros: easy numbers
  auto scaled_cfg = plain_cfg;
  scaled_cfg.scale_lr_by_staleness = true;
  auto plain = f.spawn(plain_cfg);
  auto scaled = f.spawn(scaled_cfg);
  caf::scoped_actor w{f.sys};
  for (auto shard : {plain, scaled})
    for (uint64_t step = 1; step <= 4; ++step) {
      // Every push read version 0: staleness 0, 1, 2, 3.
      auto ack = ask<ps_push_ack>(
        w, shard, ps_push_atom::value,
        make_push(0, step, 0, 1,
                  {dense_grad(0, 0, std::vector<float>(12, 1.0f))}));
      CHECK(ack.staleness == step - 1);
    }
  for (auto shard : {plain, scaled}) {
    auto st = ask<ps_shard_stats>(w, shard, ps_stats_atom::value);
    CHECK(st.staleness_sum == 6);
    CHECK(st.staleness_max == 3);
  }
  auto p = snapshot(w, {plain});
  auto s = snapshot(w, {scaled});
  CHECK(p[0] == Approx(-0.4).epsilon(1e-6));
  // lr / staleness when it is above 1: 0.1, 0.1, 0.1 / 2, 0.1 / 3.
  CHECK(s[0] == Approx(-(0.1 + 0.1 + 0.05 + 0.1 / 3)).epsilon(1e-6));
}

TEST_CASE("rows are materialised lazily with their initial values and "
          "ownership is checked",
          "[ps]") {
  ps_fixture f;
  auto cfg = shard_config(0, 2, std::nullopt);
  auto spec = cfg.params[1];
  auto shard = f.spawn(cfg);
  caf::scoped_actor w{f.sys};
  CHECK(ask<ps_shard_stats>(w, shard, ps_stats_atom::value).rows == 0);
  auto mine = owned_rows(0, 2);
  auto theirs = owned_rows(1, 2);
  REQUIRE(mine.size() >= 2);
  REQUIRE_FALSE(theirs.empty());
  std::vector<int64_t> want{mine[1], mine[0]};
  auto p = ask<ps_params>(w, shard, ps_pull_atom::value,
                          make_pull(ps_observer, 0, {rows_slice(1, want)}));
  auto& rows = slice_of(p, 1);
  CHECK(rows.index == i64(want));
  CHECK(rows.values.shape() == tensor::shape_type{2, dim});
  auto v = floats(rows.values);
  for (size_t j = 0; j < want.size(); ++j)
    for (int64_t e = 0; e < dim; ++e)
      CHECK(v[j * dim + e]
            == gpu::initial_value(spec, 42,
                                  static_cast<uint64_t>(want[j] * dim + e)));
  CHECK(ask<ps_shard_stats>(w, shard, ps_stats_atom::value).rows == 2);
  // Again: the same rows, nothing new.
  auto again = ask<ps_params>(w, shard, ps_pull_atom::value,
                              make_pull(ps_observer, 0, {rows_slice(1, want)}));
  CHECK(slice_of(again, 1).values == rows.values);
  CHECK(ask<ps_shard_stats>(w, shard, ps_stats_atom::value).rows == 2);
  // The dense slice: [lo, hi) with the values of those global elements.
  auto range = ps_dense_slice(12, 0, 2);
  auto& d = slice_of(p, 0);
  CHECK(d.offset == range.lo);
  auto dv = floats(d.values);
  REQUIRE(dv.size() == range.hi - range.lo);
  for (uint64_t i = 0; i < dv.size(); ++i)
    CHECK(dv[i] == gpu::initial_value(cfg.params[0], 42, range.lo + i));

  auto err =
    ask_error<ps_params>(w, shard, ps_pull_atom::value,
                         make_pull(ps_observer, 0, {rows_slice(1, theirs)}));
  CHECK_THAT(err, Catch::Contains("1_embedding/table")
                    && Catch::Contains("belongs to shard 1"));
  err = ask_error<ps_params>(
    w, shard, ps_pull_atom::value,
    make_pull(0, 0, {rows_slice(1, {mine[0], table_rows})}));
  CHECK_THAT(err, Catch::Contains("row 40 is out of range [0, 40)"));
  err = ask_error<ps_params>(w, shard, ps_pull_atom::value,
                             make_pull(0, 0, {rows_slice(1, {-1})}));
  CHECK_THAT(err, Catch::Contains("row -1"));
  ps_slice bad_ids;
  bad_ids.var = 1;
  bad_ids.index = tensor::allocate(dtype::i32, {1});
  *bad_ids.index.mutable_data_as<int32_t>() = static_cast<int32_t>(mine[0]);
  err = ask_error<ps_params>(w, shard, ps_pull_atom::value,
                             make_pull(0, 0, {bad_ids}));
  CHECK_THAT(err, Catch::Contains("must be i64"));
  err = ask_error<ps_params>(w, shard, ps_pull_atom::value,
                             make_pull(0, 0, {rows_slice(0, {0})}));
  CHECK_THAT(err,
             Catch::Contains("0_dense/kernel") && Catch::Contains("is dense"));
  CHECK(ask<ps_shard_stats>(w, shard, ps_stats_atom::value).rows == 2);

  // A push materialises the rows it updates from their initial values.
  auto row = mine.back();
  ask<ps_push_ack>(
    w, shard, ps_push_atom::value,
    make_push(0, 1, 0, 1, {rows_slice(1, {row}, {1.0f, 2.0f, 3.0f})}));
  auto after =
    ask<ps_params>(w, shard, ps_pull_atom::value,
                   make_pull(ps_observer, 0, {rows_slice(1, {row})}));
  auto r = floats(slice_of(after, 1).values);
  for (int64_t e = 0; e < dim; ++e)
    CHECK(r[e]
          == Approx(gpu::initial_value(spec, 42,
                                       static_cast<uint64_t>(row * dim + e))
                    - 0.1 * (e + 1))
               .epsilon(1e-6));
  CHECK(ask<ps_shard_stats>(w, shard, ps_stats_atom::value).rows == 3);
}

TEST_CASE("bad pushes get an error and the shard keeps serving", "[ps]") {
  ps_fixture f;
  auto shard = f.spawn(shard_config(0, 2, 0));
  caf::scoped_actor w{f.sys};
  auto range = ps_dense_slice(12, 0, 2);
  auto n = range.hi - range.lo;
  auto good = dense_grad(0, range.lo, std::vector<float>(n, 1.0f));
  auto mine = owned_rows(0, 2);
  auto theirs = owned_rows(1, 2);

  auto push_error = [&](std::vector<ps_slice> grads, uint64_t samples = 1) {
    return ask_error<ps_push_ack>(
      w, shard, ps_push_atom::value,
      make_push(0, 1, 0, samples, std::move(grads)));
  };
  CHECK_THAT(push_error({dense_grad(9, 0, {1.0f})}),
             Catch::Contains("unknown variable 9 (the model has 2)"));
  CHECK_THAT(
    push_error({dense_grad(0, range.lo, std::vector<float>(n + 1, 1.0f))}),
    Catch::Contains("0_dense/kernel") && Catch::Contains("slice is [0, 6)"));
  CHECK_THAT(
    push_error({dense_grad(0, range.lo + 1, std::vector<float>(n, 1.0f))}),
    Catch::Contains("0_dense/kernel"));
  auto f64 = good;
  f64.values = tensor::allocate(dtype::f64, {static_cast<int64_t>(n)});
  CHECK_THAT(push_error({f64}), Catch::Contains("must be f32, got f64"));
  CHECK_THAT(push_error({good}, 0), Catch::Contains("samples = 0"));
  ps_slice no_ids;
  no_ids.var = 1;
  no_ids.values = f32({1, 2, 3}, {1, dim});
  CHECK_THAT(push_error({no_ids}), Catch::Contains("1_embedding/table")
                                     && Catch::Contains("needs row ids"));
  CHECK_THAT(push_error({rows_slice(1, {mine[0]}, {1.0f, 2.0f})}),
             Catch::Contains("2 gradient values for 1 rows of 3"));
  CHECK_THAT(push_error({rows_slice(1, {theirs[0]}, {1.0f, 2.0f, 3.0f})}),
             Catch::Contains("belongs to shard 1"));
  ps_slice topk;
  topk.var = 0;
  topk.index = i64({static_cast<int64_t>(range.hi)});
  topk.values = f32({1.0f});
  CHECK_THAT(push_error({topk}),
             Catch::Contains("element 6 is outside this shard's slice"));
  // A bad slice after a good one: nothing of the push is applied.
  CHECK_THAT(push_error({good, dense_grad(7, 0, {1.0f})}),
             Catch::Contains("unknown variable 7"));

  // Nothing changed, and step 1 is still new.
  auto st = ask<ps_shard_stats>(w, shard, ps_stats_atom::value);
  CHECK(st.version == 0);
  CHECK(st.pushes == 0);
  auto ack = ask<ps_push_ack>(w, shard, ps_push_atom::value,
                              make_push(0, 1, 0, 1, {good}));
  CHECK(ack.applied);
  CHECK(ack.version == 1);
}

TEST_CASE("top-k pushes update only the named elements", "[ps]") {
  ps_fixture f;
  auto cfg = shard_config(0, 1, std::nullopt, "momentum");
  auto shard = f.spawn(cfg);
  caf::scoped_actor w{f.sys};
  auto before = snapshot(w, {shard});
  ps_slice topk;
  topk.var = 0;
  topk.index = i64({3, 8});
  topk.values = f32({2.0f, -4.0f});
  ask<ps_push_ack>(w, shard, ps_push_atom::value,
                   make_push(0, 1, 0, 2, {topk}));
  auto after = snapshot(w, {shard});
  for (size_t i = 0; i < 12; ++i) {
    INFO("element " << i);
    double expect = before[i];
    if (i == 3)
      expect -= 0.1 * (2.0 / 2);
    if (i == 8)
      expect -= 0.1 * (-4.0 / 2);
    CHECK(after[i] == Approx(expect).epsilon(1e-6));
  }
}

TEST_CASE("ps_wait is answered once the steps are applied or every worker "
          "is done",
          "[ps]") {
  ps_fixture f;
  SECTION("asynchronous") {
    auto shard = f.spawn(shard_config(0, 1, std::nullopt, "sgd", 2));
    caf::scoped_actor w0{f.sys};
    caf::scoped_actor w1{f.sys};
    caf::scoped_actor waiter{f.sys};
    ask<uint64_t>(w0, shard, ps_register_atom::value, uint32_t{0});
    ask<uint64_t>(w1, shard, ps_register_atom::value, uint32_t{1});
    waiter->send(shard, ps_wait_atom::value, uint64_t{3});
    ask<ps_push_ack>(w0, shard, ps_push_atom::value, make_push(0, 1, 0, 1, {}));
    ask<ps_push_ack>(w1, shard, ps_push_atom::value, make_push(1, 1, 0, 1, {}));
    CHECK_FALSE(answer_within<ps_progress>(waiter, 100ms));
    ask<ps_push_ack>(w0, shard, ps_push_atom::value,
                     make_push(0, 2, 0, 0, {})); // skipped steps count
    auto p = answer_within<ps_progress>(waiter, 5s);
    REQUIRE(p);
    CHECK(p->steps == 3);
    CHECK_FALSE(p->finished);
    CHECK(ask<ps_shard_stats>(w0, shard, ps_stats_atom::value).skipped == 1);

    waiter->send(shard, ps_wait_atom::value, uint64_t{100});
    ask<uint64_t>(w0, shard, ps_done_atom::value, uint32_t{0});
    CHECK_FALSE(answer_within<ps_progress>(waiter, 100ms));
    ask<uint64_t>(w1, shard, ps_done_atom::value, uint32_t{1});
    p = answer_within<ps_progress>(waiter, 5s);
    REQUIRE(p);
    CHECK(p->steps == 3);
    CHECK(p->finished);
    // Answered at once from now on.
    CHECK(ask<ps_progress>(waiter, shard, ps_wait_atom::value, uint64_t{100})
            .finished);
  }
  SECTION("tau 0: when the clock is applied") {
    auto shard = f.spawn(shard_config(0, 1, 0, "sgd", 2));
    caf::scoped_actor w0{f.sys};
    caf::scoped_actor w1{f.sys};
    caf::scoped_actor waiter{f.sys};
    waiter->send(shard, ps_wait_atom::value, uint64_t{1});
    ask<ps_push_ack>(w0, shard, ps_push_atom::value, make_push(0, 1, 0, 1, {}));
    // Worker 1 has not even registered: it is expected, the clock waits.
    CHECK_FALSE(answer_within<ps_progress>(waiter, 100ms));
    ask<ps_push_ack>(w1, shard, ps_push_atom::value, make_push(1, 1, 0, 1, {}));
    auto p = answer_within<ps_progress>(waiter, 5s);
    REQUIRE(p);
    CHECK(p->steps == 2);
  }
}

TEST_CASE("a shard shutting down fails the pulls that wait", "[ps]") {
  ps_fixture f;
  auto shard = f.spawn(shard_config(0, 1, 0, "sgd", 2));
  caf::scoped_actor w{f.sys};
  ask<ps_push_ack>(w, shard, ps_push_atom::value, make_push(0, 1, 0, 1, {}));
  std::string err;
  bool answered = false;
  auto pending = w->request(shard, 10s, ps_pull_atom::value, make_pull(0, 1));
  caf::scoped_actor other{f.sys};
  REQUIRE(ask<ps_shard_stats>(other, shard, ps_stats_atom::value).delayed_pulls
          == 1);
  caf::anon_send_exit(shard, caf::exit_reason::user_shutdown);
  pending.receive([&](ps_params&) { answered = true; },
                  [&](caf::error& e) { err = w->system().render(e); });
  CHECK_FALSE(answered);
  CHECK_THAT(err, Catch::Contains("shutting down"));
}

TEST_CASE("a config that cannot make a shard is refused", "[ps]") {
  ps_fixture f;
  auto c = shard_config(2, 2, 0);
  CHECK_THROWS_WITH(spawn_ps_shard(f.sys, c),
                    Catch::Contains("shard 2 of 2 shards"));
  c = shard_config(0, 1, 0, "adamw");
  CHECK_THROWS_WITH(spawn_ps_shard(f.sys, c),
                    Catch::Contains("unknown optimizer \"adamw\""));
  c = shard_config(0, 1, 0);
  c.params[1].shape = {40};
  CHECK_THROWS_WITH(spawn_ps_shard(f.sys, c),
                    Catch::Contains("1_embedding/table"));
}

TEST_CASE("the shard state machine counts expected workers until they "
          "register",
          "[ps]") {
  ps_shard_state st{shard_config(0, 1, 1, "sgd", 2)};
  ps_push_ack ack;
  REQUIRE(st.push(make_push(0, 1, 0, 1, {}), ack).empty());
  REQUIRE(st.push(make_push(0, 2, 0, 1, {}), ack).empty());
  std::optional<ps_params> answer;
  // Clock 2 is 2 ahead of the missing worker 1 (at 0): waits.
  REQUIRE(st.pull(7, make_pull(0, 2), answer).empty());
  CHECK_FALSE(answer);
  CHECK(st.waiting() == 1);
  st.register_worker(1);
  CHECK(st.take_released().pulls.empty());
  // Worker 1 leaving lets it through.
  st.leave(1, false);
  auto r = st.take_released();
  REQUIRE(r.pulls.size() == 1);
  CHECK(r.pulls[0].first == 7);
  CHECK(r.pulls[0].second.version == 2);
  CHECK_FALSE(st.progress().finished);
  st.leave(0, false);
  CHECK(st.progress().finished);
  CHECK(st.stats().workers_lost == 0);
  // A worker that left cannot push until it registers again.
  CHECK_THAT(st.push(make_push(0, 3, 2, 1, {}), ack),
             Catch::Contains("has left"));
  st.register_worker(0);
  CHECK(st.push(make_push(0, 3, 2, 1, {}), ack).empty());
  CHECK(ack.applied);
}

TEST_CASE("a worker that left registers again at the slowest live "
          "worker's clock (a respawned trainer), as does a late new one",
          "[ps]") {
  ps_shard_state st{shard_config(0, 1, 2, "sgd", 2)};
  st.register_worker(0);
  st.register_worker(1);
  ps_push_ack ack;
  for (uint64_t step = 1; step <= 3; ++step)
    REQUIRE(st.push(make_push(1, step, 0, 1, {}), ack).empty());
  REQUIRE(st.push(make_push(0, 1, 0, 1, {}), ack).empty());
  // Worker 0 is lost; worker 1 goes on without it.
  st.leave(0, true);
  for (uint64_t step = 4; step <= 6; ++step)
    REQUIRE(st.push(make_push(1, step, 0, 1, {}), ack).empty());
  // Back at worker 1's clock 6, not its own 1: it holds nobody back ...
  st.register_worker(0);
  CHECK(st.clock_of(0) == 6);
  std::optional<ps_params> answer;
  REQUIRE(st.pull(1, make_pull(1, 7), answer).empty());
  CHECK(answer);
  // ... and its steps go on from there: a step at or below is a retry.
  REQUIRE(st.push(make_push(0, 6, 0, 1, {}), ack).empty());
  CHECK_FALSE(ack.applied);
  REQUIRE(st.push(make_push(0, 7, 0, 1, {}), ack).empty());
  CHECK(ack.applied);
  // A worker beyond the expected ones, registering late: the same.
  st.register_worker(2);
  CHECK(st.clock_of(2) == 6);
  // Not a worker that joins a restored shard with its own clock: it goes
  // on from that (ps_client::impl::rejoin).
  st.register_worker(3, 2, false);
  CHECK(st.clock_of(3) == 2);
  // While an expected worker is missing, a new one starts at 0 as before.
  ps_shard_state fresh{shard_config(0, 1, 2, "sgd", 3)};
  fresh.register_worker(0);
  REQUIRE(fresh.push(make_push(0, 1, 0, 1, {}), ack).empty());
  fresh.register_worker(1);
  CHECK(fresh.clock_of(1) == 0);
}

TEST_CASE("the coordinator's word that a worker is lost, after the shard "
          "saw it go down, does not drop a trainer respawned since",
          "[ps]") {
  ps_fixture f;
  auto c = shard_config(0, 1, std::nullopt, "sgd", 2);
  c.worker_stage = "train";
  auto shard = f.spawn(c);
  caf::scoped_actor w0{f.sys}, coordinator{f.sys};
  ask<uint64_t>(w0, shard, ps_register_atom::value, uint32_t{0});
  {
    caf::scoped_actor lost{f.sys};
    ask<uint64_t>(lost, shard, ps_register_atom::value, uint32_t{1});
    ask<ps_push_ack>(lost, shard, ps_push_atom::value,
                     make_push(1, 1, 0, 1, {}));
  } // worker 1 goes down here
  for (int i = 0; i < 500; ++i) {
    if (ask<ps_shard_stats>(w0, shard, ps_stats_atom::value).workers_lost > 0)
      break;
    std::this_thread::sleep_for(10ms);
  }
  REQUIRE(ask<ps_shard_stats>(w0, shard, ps_stats_atom::value).workers_lost
          == 1);
  caf::scoped_actor respawned{f.sys};
  ask<uint64_t>(respawned, shard, ps_register_atom::value, uint32_t{1});
  CHECK(ask<uint64_t>(respawned, shard, ps_clock_atom::value, uint32_t{1})
        == 1);
  // The coordinator's report of the first loss comes late: old news.
  coordinator->send(shard, replica_lost_atom::value, std::string{"train"},
                    uint32_t{1});
  auto ack = ask<ps_push_ack>(respawned, shard, ps_push_atom::value,
                              make_push(1, 2, 0, 1, {}));
  CHECK(ack.applied);
  // A second report is a new loss: the worker leaves.
  coordinator->send(shard, replica_lost_atom::value, std::string{"train"},
                    uint32_t{1});
  caf::error refused;
  respawned
    ->request(shard, caf::infinite, ps_push_atom::value,
              make_push(1, 3, 0, 1, {}))
    .receive([](ps_push_ack&) {}, [&](caf::error& err) { refused = err; });
  CHECK(refused);
  CHECK_THAT(f.sys.render(refused), Catch::Contains("has left"));
}

TEST_CASE("a pull's answer shares the shard's values and keeps them when a "
          "later push changes the shard (copy on write)",
          "[ps]") {
  ps_shard_state st{shard_config(0, 1, std::nullopt)};
  st.register_worker(0);
  std::optional<ps_params> first, part;
  REQUIRE(st.pull(1, make_pull(0, 0), first).empty());
  REQUIRE(first);
  auto pull_part = make_pull(0, 0);
  pull_part.part = 1;
  pull_part.parts = 3; // the 12 dense elements in 3 parts: [4, 8)
  REQUIRE(st.pull(2, pull_part, part).empty());
  REQUIRE(part);
  auto before = st.values(0, {});
  REQUIRE(before.size() == 12);
  REQUIRE(first->slices.size() == 1);
  CHECK(floats(first->slices[0].values) == before);
  REQUIRE(part->slices.size() == 1);
  CHECK(part->slices[0].offset == 4);
  CHECK(floats(part->slices[0].values)
        == std::vector<float>(before.begin() + 4, before.begin() + 8));
  // The answers still hold the values: the push writes a copy.
  ps_push_ack ack;
  REQUIRE(st.push(make_push(0, 1, 0, 1,
                            {dense_grad(0, 0, std::vector<float>(12, 1.0f))}),
                  ack)
            .empty());
  auto after = st.values(0, {});
  for (size_t i = 0; i < 12; ++i)
    CHECK(after[i] == Approx(before[i] - 0.1f));
  CHECK(floats(first->slices[0].values) == before);
  CHECK(floats(part->slices[0].values)
        == std::vector<float>(before.begin() + 4, before.begin() + 8));
  // Once no answer holds them, a push changes them in place: a new answer
  // sees the change.
  first.reset();
  part.reset();
  REQUIRE(st.push(make_push(0, 2, 1, 1,
                            {dense_grad(0, 0, std::vector<float>(12, 1.0f))}),
                  ack)
            .empty());
  std::optional<ps_params> third;
  REQUIRE(st.pull(3, make_pull(0, 0), third).empty());
  REQUIRE(third);
  CHECK(floats(third->slices[0].values) == st.values(0, {}));
  CHECK(st.values(0, {})[0] == Approx(before[0] - 0.2f));
}

TEST_CASE("a worker paused at a checkpoint cut is out of the clocks but "
          "not done, and rejoins with its clock",
          "[ps][checkpoint]") {
  ps_shard_state st{shard_config(0, 1, 0, "sgd", 2)};
  st.register_worker(0);
  st.register_worker(1);
  ps_push_ack ack;
  // tau = 0: worker 1's clock 1 waits for worker 0's.
  REQUIRE(st.push(make_push(1, 1, 0, 1, {}), ack).empty());
  CHECK(st.version() == 0);
  // Worker 0 reached the cut with fewer batches: pausing it completes the
  // clock, and the shard is not finished.
  st.pause(0);
  CHECK(st.version() == 1);
  CHECK_FALSE(st.progress().finished);
  std::optional<ps_params> answer;
  REQUIRE(st.pull(1, make_pull(1, 1), answer).empty());
  CHECK(answer); // not held back by the paused worker
  // The pause survives a snapshot.
  ps_shard_state copy{shard_config(0, 1, 0, "sgd", 2)};
  copy.restore(st.snapshot());
  CHECK_FALSE(copy.progress().finished);
  REQUIRE(copy.push(make_push(1, 2, 1, 1, {}), ack).empty());
  CHECK(copy.version() == 2); // worker 0 still out of the clocks
  // Rejoining: worker 0 is back at its clock 0 and holds clock 3 up.
  copy.register_worker(0);
  REQUIRE(copy.push(make_push(1, 3, 2, 1, {}), ack).empty());
  CHECK(copy.version() == 2);
  REQUIRE(copy.push(make_push(0, 1, 2, 1, {}), ack).empty());
  REQUIRE(copy.push(make_push(0, 3, 2, 1, {}), ack).empty());
  CHECK(copy.version() == 4);
}

// --- snapshot and restore --------------------------------------------------

namespace {

// What an observer pull of every row the shard owns returns: the dense
// slice and the table's rows, bitwise.
std::vector<tensor> pulled(caf::scoped_actor& self, const caf::actor& shard,
                           uint32_t index, uint32_t shards) {
  auto p = ask<ps_params>(
    self, shard, ps_pull_atom::value,
    make_pull(ps_observer, 0, {rows_slice(1, owned_rows(index, shards))}));
  return {slice_of(p, 0).values, slice_of(p, 1).values};
}

// Worker `w`'s push of `clock` for shard 1 of 2, plus (worker 0) a top-k
// gradient of two of the slice's elements on top of the whole slice.
ps_push push_of(uint32_t w, uint64_t clock, uint64_t read_version) {
  auto g = gradient_of(static_cast<int>(w), static_cast<int>(clock));
  auto grads = grads_for(g, 1, 2);
  if (w == 0) {
    auto r = ps_dense_slice(12, 1, 2);
    ps_slice topk;
    topk.var = 0;
    topk.index =
      i64({static_cast<int64_t>(r.lo + 1), static_cast<int64_t>(r.hi - 1)});
    topk.values = f32({0.5f * static_cast<float>(clock), -0.25f});
    grads.push_back(topk);
  }
  return make_push(w, clock, read_version, g.samples, std::move(grads));
}

} // namespace

TEST_CASE("a shard restored from a snapshot pulls and trains bitwise like "
          "the original",
          "[ps][snapshot]") {
  for (const char* optimizer : {"adam", "momentum"}) {
    INFO(optimizer);
    ps_fixture f;
    // tau = 0 with two workers: the snapshot holds a clock only worker 0
    // has pushed.
    auto cfg = shard_config(1, 2, 0, optimizer, 2);
    auto a = f.spawn(cfg);
    caf::scoped_actor w0{f.sys};
    caf::scoped_actor w1{f.sys};
    for (uint64_t clock = 1; clock <= 3; ++clock)
      for (uint32_t w : {0u, 1u})
        REQUIRE(ask<ps_push_ack>(w == 0 ? w0 : w1, a, ps_push_atom::value,
                                 push_of(w, clock, clock - 1))
                  .applied);
    REQUIRE(
      ask<ps_push_ack>(w0, a, ps_push_atom::value, push_of(0, 4, 3)).version
      == 3);
    auto bytes = ask<std::string>(w0, a, ps_snapshot_atom::value);

    auto b = f.spawn(cfg);
    CHECK(ask<uint64_t>(w0, b, ps_restore_atom::value, bytes) == 3);
    CHECK(ask<std::string>(w0, b, ps_snapshot_atom::value) == bytes);
    CHECK(pulled(w0, b, 1, 2) == pulled(w0, a, 1, 2));
    auto sa = ask<ps_shard_stats>(w0, a, ps_stats_atom::value);
    auto sb = ask<ps_shard_stats>(w0, b, ps_stats_atom::value);
    CHECK(sb.version == sa.version);
    CHECK(sb.pushes == sa.pushes);
    CHECK(sb.rows == sa.rows);

    // The same pushes from here on: a retry of worker 0's pending step is
    // still a duplicate, worker 1 completes clock 4, then clock 5.
    for (auto& shard : {a, b}) {
      CHECK_FALSE(
        ask<ps_push_ack>(w0, shard, ps_push_atom::value, push_of(0, 4, 3))
          .applied);
      CHECK(ask<ps_push_ack>(w1, shard, ps_push_atom::value, push_of(1, 4, 3))
              .version
            == 4);
      for (uint32_t w : {0u, 1u})
        ask<ps_push_ack>(w == 0 ? w0 : w1, shard, ps_push_atom::value,
                         push_of(w, 5, 4));
    }
    auto after = pulled(w0, a, 1, 2);
    CHECK(pulled(w0, b, 1, 2) == after);
    CHECK(ask<std::string>(w0, b, ps_snapshot_atom::value)
          == ask<std::string>(w0, a, ps_snapshot_atom::value));
    sb = ask<ps_shard_stats>(w0, b, ps_stats_atom::value);
    CHECK(sb.version == 5);
    CHECK(sb.duplicates == 1);
    // And it did train: the values moved since the snapshot.
    ps_shard_state fresh{cfg};
    fresh.restore(bytes);
    CHECK(fresh.values(0) != floats(after[0]));
  }
}

TEST_CASE("a shard refuses to restore a snapshot of another shard, model or "
          "optimizer, or damaged bytes, and keeps its state",
          "[ps][restore]") {
  auto trained = [](ps_shard_config c) {
    auto st = std::make_unique<ps_shard_state>(c);
    ps_push_ack ack;
    auto g = gradient_of(0, 1);
    auto grads = grads_for(g, c.shard, c.shards);
    if (grads.size() > c.params.size()) // a model with fewer variables
      grads.resize(c.params.size());
    REQUIRE(st->push(make_push(0, 1, 0, g.samples, grads), ack).empty());
    return st;
  };
  auto mine = trained(shard_config(0, 2, std::nullopt, "adam"));
  auto bytes = mine->snapshot();
  auto other_shard = trained(shard_config(1, 2, std::nullopt, "adam"));
  auto before = other_shard->snapshot();

  auto refused = [](ps_shard_state& st, const std::string& snap,
                    const std::string& message) {
    auto was = st.snapshot();
    CHECK_THROWS_AS(st.restore(snap), std::invalid_argument);
    CHECK_THROWS_WITH(st.restore(snap), Catch::Contains(message));
    CHECK(st.snapshot() == was);
  };
  refused(*other_shard, bytes, "shard 0 of 2, this is shard 1 of 2");
  refused(*other_shard, "", "not a parameter-server shard snapshot");
  refused(*other_shard, "garbage bytes, not a snapshot at all",
          "not a parameter-server shard snapshot");
  refused(*other_shard, "AFPSSNAP" + std::string(40, '\x01'), "format version");
  for (size_t n : {size_t{8}, size_t{12}, size_t{40}, bytes.size() / 2,
                   bytes.size() - 1}) {
    INFO("truncated to " << n << " bytes");
    refused(*mine, bytes.substr(0, n), "restore");
  }
  auto flipped = bytes;
  flipped[flipped.size() / 2] ^= 1;
  refused(*mine, flipped, "damaged or truncated");
  CHECK(other_shard->snapshot() == before);

  auto c = shard_config(0, 2, std::nullopt, "adam");
  c.params[0].shape = {4, 3};
  refused(*trained(c), bytes, "0_dense/kernel");
  c = shard_config(0, 2, std::nullopt, "adam");
  c.params[1].name = "1_embedding/other";
  refused(*trained(c), bytes, "1_embedding/other");
  c = shard_config(0, 2, std::nullopt, "adam");
  c.params.pop_back();
  refused(*trained(c), bytes, "2 variables in the snapshot, 1 in the model");
  refused(*trained(shard_config(0, 2, std::nullopt, "momentum")), bytes,
          "optimizer \"adam\" in the snapshot");
  refused(*trained(shard_config(0, 3, std::nullopt, "adam")), bytes,
          "shard 0 of 2, this is shard 0 of 3");

  // Through the actor: an error answer, and the shard goes on serving.
  ps_fixture f;
  auto shard = f.spawn(shard_config(0, 2, std::nullopt, "adam"));
  caf::scoped_actor w{f.sys};
  auto g = gradient_of(0, 1);
  ask<ps_push_ack>(w, shard, ps_push_atom::value,
                   make_push(0, 1, 0, g.samples, grads_for(g, 0, 2)));
  auto good = ask<std::string>(w, shard, ps_snapshot_atom::value);
  CHECK(good == bytes);
  auto err = ask_error<uint64_t>(w, shard, ps_restore_atom::value,
                                 bytes.substr(0, bytes.size() - 3));
  CHECK_THAT(err, Catch::Contains("ps[0]: restore"));
  CHECK(ask<std::string>(w, shard, ps_snapshot_atom::value) == good);
  auto ack = ask<ps_push_ack>(w, shard, ps_push_atom::value,
                              make_push(0, 2, 1, 1, grads_for(g, 0, 2)));
  CHECK(ack.applied);
  CHECK(ack.version == 2);
  // A good snapshot puts it back where it was.
  CHECK(ask<uint64_t>(w, shard, ps_restore_atom::value, good) == 1);
  CHECK(ask<std::string>(w, shard, ps_snapshot_atom::value) == good);
}
