// The worker side of the parameter-server protocol (runtime/ps/ps_client.hpp)
// against real shards in one actor system: what a pull reads, what a push
// changes, and pushes and pulls in parts.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include "actorflow/actors/ps_shard/ps_shard.hpp"
#include "actorflow/gpu/device.hpp"
#include "actorflow/gpu/model.hpp"
#include "actorflow/runtime/ps/ps_client.hpp"
#include "tests/support/harness.hpp"

using namespace af;

namespace {

constexpr uint64_t seed = 7;
constexpr double learning_rate = 0.5;

struct client_fixture {
  test::config cfg;
  caf::actor_system sys{cfg};
  std::vector<caf::actor> shards;

  // `k` SGD shards of `params`, one expected worker.
  std::vector<caf::actor> spawn(const std::vector<gpu::param_spec>& params,
                                uint32_t k) {
    std::vector<caf::actor> made;
    for (uint32_t s = 0; s < k; ++s) {
      ps_shard_config c;
      c.shard = s;
      c.shards = k;
      c.params = params;
      c.optimizer.type = "sgd";
      c.optimizer.learning_rate = learning_rate;
      c.expected_workers = 1;
      c.seed = seed;
      c.name = "ps[" + std::to_string(s) + "]";
      made.push_back(spawn_ps_shard(sys, std::move(c)));
    }
    shards.insert(shards.end(), made.begin(), made.end());
    return made;
  }

  ps_shard_stats stats(const caf::actor& shard) {
    ps_shard_stats out;
    caf::scoped_actor self{sys};
    self->request(shard, std::chrono::seconds{10}, ps_stats_atom::value)
      .receive([&](ps_shard_stats& st) { out = st; },
               [&](caf::error& err) { FAIL(sys.render(err)); });
    return out;
  }

  ~client_fixture() {
    for (auto& s : shards)
      caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
  }
};

// The largest `parts` of the pulls and of the pushes that went through a
// spy.
struct traffic {
  std::atomic<uint32_t> pull_parts{0};
  std::atomic<uint32_t> push_parts{0};
  std::atomic<uint32_t> pushes{0}; // messages
  std::atomic<uint32_t> pulls{0};  // messages
  std::atomic<uint32_t> steps{0};  // messages with a push and a pull
};

void note(std::atomic<uint32_t>& most, uint32_t parts) {
  auto seen = most.load();
  while (parts > seen && !most.compare_exchange_weak(seen, parts)) {
  }
}

// Stands in front of `shard` and passes on what a worker sends it, noting
// the parts. (A function with arguments: spawning one without makes CAF
// 0.17 dereference an empty shared_ptr<tuple<>>, see credit_test.cpp.)
caf::behavior spy(caf::event_based_actor* self, caf::actor shard,
                  std::shared_ptr<traffic> t) {
  return {
    [=](ps_register_atom a, uint32_t worker) {
      return self->delegate(shard, a, worker);
    },
    [=](ps_clock_atom a, uint32_t worker) {
      return self->delegate(shard, a, worker);
    },
    [=](ps_done_atom a, uint32_t worker) {
      return self->delegate(shard, a, worker);
    },
    [=](ps_pull_atom a, ps_pull& p) {
      note(t->pull_parts, p.parts);
      ++t->pulls;
      return self->delegate(shard, a, std::move(p));
    },
    [=](ps_step_atom a, ps_push& p, ps_pull& q) {
      ++t->steps;
      return self->delegate(shard, a, std::move(p), std::move(q));
    },
    [=](ps_push_atom a, ps_push& p) {
      note(t->push_parts, p.parts);
      ++t->pushes;
      return self->delegate(shard, a, std::move(p));
    },
  };
}

gpu::layer_spec dense(int64_t units) {
  gpu::layer_spec l;
  l.type = "dense";
  l.units = units;
  return l;
}

gpu::model_spec model_of(std::vector<int64_t> input,
                         std::vector<gpu::layer_spec> layers) {
  gpu::model_spec spec;
  spec.input_shape = std::move(input);
  spec.layers = std::move(layers);
  spec.loss = "softmax_cross_entropy";
  return spec;
}

// A model on the CPU, `k` shards of its parameters and the client of
// worker 0, joined; `front` stands in front of each shard, if set.
struct worker {
  std::vector<gpu::param_spec> params;
  std::vector<caf::actor> shards;
  std::unique_ptr<gpu::device> dev = gpu::make_cpu_device();
  gpu::model m;
  ps_client client;

  worker(client_fixture& f, const gpu::model_spec& spec, uint32_t k,
         const std::function<caf::actor(caf::actor)>& front = {})
    : params(gpu::param_specs(spec)), shards(f.spawn(params, k)),
      m(spec, *dev), client(f.sys, fronts(f, front), params, 0) {
    client.join();
  }

  std::vector<caf::actor>
  fronts(client_fixture& f, const std::function<caf::actor(caf::actor)>& front) {
    if (!front)
      return shards;
    std::vector<caf::actor> out;
    for (auto& s : shards)
      out.push_back(front(s));
    f.shards.insert(f.shards.end(), out.begin(), out.end());
    return out;
  }
};

// Parameter i of `m`, from its device.
std::vector<float> values(gpu::model& m, size_t i, size_t count) {
  std::vector<float> v(count);
  m.dev().download(v.data(), m.value(i).get(), count * sizeof(float));
  return v;
}

void set_grad(gpu::model& m, size_t i, const std::vector<float>& g) {
  m.dev().upload(m.grad(i).get(), g.data(), g.size() * sizeof(float));
}

// A gradient of n floats, multiples of 1/8 so that lr * g / samples is
// exact.
std::vector<float> gradient(size_t n, float sign = 1) {
  std::vector<float> g(n);
  for (size_t j = 0; j < n; ++j)
    g[j] = sign * static_cast<float>(static_cast<int>(j % 7) - 3) / 8.0f;
  return g;
}

// An embedding table of 20 rows of 2 (sparse, sharded by row) over 2
// features, then a dense layer of 3 (sharded by range): table [20, 2],
// kernel [4, 3], bias [3].
gpu::model_spec table_then_dense() {
  gpu::layer_spec table;
  table.type = "embedding";
  table.rows = 20;
  table.dim = 2;
  return model_of({2}, {table, dense(3)});
}

} // namespace

TEST_CASE("a pull reads the shards' initial values and a push moves them "
          "by the optimizer's rule",
          "[ps][ps_client]") {
  // Over three shards.
  auto spec = table_then_dense();
  client_fixture f;
  worker w{f, spec, 3};
  auto& [params, shards, dev, m, client] = w;
  REQUIRE(params.size() == 3); // table [20, 2], kernel [4, 3], bias [3]
  REQUIRE(params[0].sparse);
  const std::vector<int64_t> rows = {3, 7, 11, 19};
  client.pull(m, 0, rows);
  // What each local row and dense element must hold, from the seed alone.
  auto expected = [&](size_t i, size_t j) {
    auto element = params[i].sparse
                     ? static_cast<uint64_t>(rows[j / 2]) * 2 + j % 2
                     : j;
    return gpu::initial_value(params[i], seed, element);
  };
  std::vector<size_t> count = {rows.size() * 2, 12, 3};
  std::vector<std::vector<float>> before(3);
  for (size_t i = 0; i < 3; ++i) {
    before[i] = values(m, i, count[i]);
    for (size_t j = 0; j < count[i]; ++j)
      CHECK(before[i][j] == expected(i, j));
  }
  // Sums over 2 samples: sgd moves w by lr * g / 2.
  std::vector<std::vector<float>> g(3);
  for (size_t i = 0; i < 3; ++i) {
    g[i] = gradient(count[i], i == 1 ? -1.0f : 1.0f);
    set_grad(m, i, g[i]);
  }
  auto r = client.push(m, 1, 2, rows, 0);
  CHECK(r.nonfinite.empty());
  CHECK_FALSE(r.acknowledged); // nothing was outstanding
  CHECK(client.flush().acknowledged);
  client.pull(m, 1, rows);
  CHECK(client.read_version() == 1);
  for (size_t i = 0; i < 3; ++i) {
    auto after = values(m, i, count[i]);
    for (size_t j = 0; j < count[i]; ++j)
      CHECK(after[j]
            == Approx(before[i][j] - learning_rate * g[i][j] / 2).margin(1e-6));
  }
  // Rows no push touched keep their initial values.
  client.pull(m, 1, {0, 5});
  auto untouched = values(m, 0, 4);
  CHECK(untouched[0] == gpu::initial_value(params[0], seed, 0));
  CHECK(untouched[3] == gpu::initial_value(params[0], seed, 5 * 2 + 1));
  client.leave();
  CHECK(client.wait(1).finished);
}

TEST_CASE("a gradient with NaN is not pushed but advances the clock",
          "[ps][ps_client]") {
  auto spec = model_of({4}, {dense(2)});
  client_fixture f;
  worker w{f, spec, 2};
  auto& [params, shards, dev, m, client] = w;
  client.pull(m, 0, {});
  auto before = values(m, 0, 8);
  auto g = gradient(8);
  g[5] = std::numeric_limits<float>::quiet_NaN();
  set_grad(m, 0, g);
  set_grad(m, 1, gradient(2));
  CHECK(client.push(m, 1, 1, {}, 0).nonfinite == params[0].name);
  client.flush();
  client.pull(m, 1, {});
  CHECK(values(m, 0, 8) == before);
  for (auto& s : shards)
    CHECK(f.stats(s).skipped == 1);
  client.leave();
}

TEST_CASE("pushes and pulls in parts set the same values as one message "
          "per shard",
          "[ps][ps_client]") {
  // 75 floats over 2 shards: about 150 bytes a shard, 5 parts of 32.
  auto spec = model_of({8}, {dense(6), dense(3)});
  auto params = gpu::param_specs(spec);
  REQUIRE(params.size() == 4);
  client_fixture f;
  // Two pushes of the same gradient, then a pull: each parameter's values.
  auto train = [&](size_t part_bytes, size_t window,
                   const std::shared_ptr<traffic>& t) {
    worker w{f, spec, 2,
             [&](caf::actor shard) { return f.sys.spawn(spy, shard, t); }};
    auto& m = w.m;
    auto& client = w.client;
    client.set_part_bytes(part_bytes, window);
    client.pull(m, 0, {});
    std::vector<std::vector<float>> out;
    for (size_t i = 0; i < params.size(); ++i)
      out.push_back(values(m, i, static_cast<size_t>(params[i].size())));
    for (size_t i = 0; i < params.size(); ++i)
      set_grad(m, i,
               gradient(static_cast<size_t>(params[i].size()),
                        i % 2 == 0 ? 1.0f : -1.0f));
    client.push(m, 1, 4, {}, 0);
    client.push(m, 2, 4, {}, 0);
    client.pull(m, 2, {});
    for (size_t i = 0; i < params.size(); ++i)
      out.push_back(values(m, i, static_cast<size_t>(params[i].size())));
    for (auto& s : w.shards)
      CHECK(f.stats(s).pushes == 2); // a push in parts is applied once
    client.leave();
    return out;
  };
  auto one = std::make_shared<traffic>();
  auto cut = std::make_shared<traffic>();
  auto whole = train(0, 8, one);
  auto parts = train(32, 1, cut);
  CHECK(one->pull_parts == 1);
  CHECK(one->push_parts == 1);
  CHECK(one->pushes == 4);
  CHECK(cut->pull_parts >= 4);
  CHECK(cut->push_parts >= 4);
  CHECK(cut->pushes > 8);
  REQUIRE(whole.size() == parts.size());
  for (size_t i = 0; i < whole.size(); ++i)
    CHECK(whole[i] == parts[i]);
  // Both moved by the rule: two pushes of g over 4 samples, lr * g / 2.
  for (size_t i = 0; i < params.size(); ++i) {
    auto g = gradient(static_cast<size_t>(params[i].size()),
                      i % 2 == 0 ? 1.0f : -1.0f);
    auto& start = parts[i];
    auto& end = parts[params.size() + i];
    for (size_t j = 0; j < g.size(); ++j)
      CHECK(end[j]
            == Approx(start[j] - 2 * learning_rate * g[j] / 4).margin(1e-6));
  }
}

TEST_CASE("a push with the next pull reads what a push, then a pull reads, "
          "in one request per shard each way",
          "[ps][ps_client]") {
  // Sparse rows and dense slices over 2 shards.
  auto spec = table_then_dense();
  auto params = gpu::param_specs(spec);
  REQUIRE(params.size() == 3);
  const std::vector<std::vector<int64_t>> rows = {
    {3, 7, 11, 19}, {0, 3, 5, 8}, {1, 7, 12, 19}};
  std::vector<size_t> count = {8, 12, 3};
  client_fixture f;
  // Three steps; every parameter after each pull. `together`: the pushes
  // carry the next pulls; `part_bytes`: parts (which cannot go together).
  auto train = [&](bool together, size_t part_bytes,
                   const std::shared_ptr<traffic>& t) {
    worker w{f, spec, 2,
             [&](caf::actor shard) { return f.sys.spawn(spy, shard, t); }};
    auto& m = w.m;
    auto& client = w.client;
    client.set_part_bytes(part_bytes, 1);
    std::vector<std::vector<float>> out;
    auto take = [&] {
      for (size_t i = 0; i < params.size(); ++i)
        out.push_back(values(m, i, count[i]));
    };
    client.pull(m, 0, rows[0]);
    take();
    std::vector<ps_client::push_result> results;
    for (uint64_t step = 1; step <= 2; ++step) {
      for (size_t i = 0; i < params.size(); ++i)
        set_grad(m, i,
                 gradient(count[i], (i + step) % 2 == 0 ? 1.0f : -1.0f));
      if (together) {
        results.push_back(
          client.push_then_pull(m, step, 2, rows[step - 1], 0, step, rows[step]));
        CHECK_THROWS_AS(client.pull_async(step, rows[step]), std::logic_error);
        client.pull_wait(m);
      } else {
        results.push_back(client.push(m, step, 2, rows[step - 1], 0));
        client.pull(m, step, rows[step]);
      }
      take();
    }
    CHECK_FALSE(results[0].acknowledged); // nothing was outstanding
    CHECK(results[1].acknowledged);
    CHECK(results[1].staleness_max == 0);
    CHECK(client.flush().acknowledged);
    CHECK(client.read_version() == 2);
    for (auto& s : w.shards)
      CHECK(f.stats(s).pushes == 2);
    client.leave();
    return out;
  };
  auto apart = std::make_shared<traffic>();
  auto with = std::make_shared<traffic>();
  auto cut = std::make_shared<traffic>();
  auto expected = train(false, 0, apart);
  auto together = train(true, 0, with);
  auto in_parts = train(true, 8, cut);
  CHECK(expected == together);
  CHECK(expected == in_parts);
  // The two steps' pushes went with their pulls: 2 messages per shard.
  CHECK(apart->steps == 0);
  CHECK(with->steps == 4);
  CHECK(with->pushes == 0);
  CHECK(with->pulls == 2); // the first pull only
  CHECK(apart->pushes + apart->pulls == 4 + 6);
  // In parts they cannot: a push and a pull, as before.
  CHECK(cut->steps == 0);
  CHECK(cut->push_parts > 1);
  // The values moved: the second push changed what the third pull read.
  CHECK(expected[3] != expected[6]);
}

TEST_CASE("a push with the next pull that nobody waits for is acknowledged "
          "by flush",
          "[ps][ps_client]") {
  auto spec = model_of({4}, {dense(2)});
  client_fixture f;
  auto t = std::make_shared<traffic>();
  worker w{f, spec, 2,
           [&](caf::actor shard) { return f.sys.spawn(spy, shard, t); }};
  auto& [params, shards, dev, m, client] = w;
  client.pull(m, 0, {});
  set_grad(m, 0, gradient(8));
  set_grad(m, 1, gradient(2));
  client.push_then_pull(m, 1, 1, {}, 0, 1, {});
  auto r = client.flush();
  CHECK(r.acknowledged);
  CHECK(t->steps == 2);
  // The pull is no longer outstanding: a new one can go.
  client.pull(m, 1, {});
  CHECK(client.read_version() == 1);
  client.leave();
}
