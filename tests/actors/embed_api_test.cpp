// The embedding API (docs/embedding.md): custom stages through map_stage
// and stage_type_of, pipelines built in code, and a job followed from an
// application's own actor (listener messages, outlet batches and credit).
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>

#include <caf/after.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include "actorflow/actors/actorflow.hpp"
#include "tests/support/harness.hpp"

using namespace af;

namespace {

// What the application's actor saw.
struct seen {
  std::mutex mtx;
  std::vector<int64_t> labels;
  std::set<std::string> outlets;
  size_t batches = 0;
  size_t progress = 0;
  size_t done = 0;
  run_result result;
  size_t held_max = 0; // holding_app: most answers held back at once
};

caf::behavior app(caf::event_based_actor* self, std::shared_ptr<seen> s) {
  return {
    [=](outlet_atom, const std::string& outlet, const batch& b) {
      std::lock_guard<std::mutex> guard{s->mtx};
      s->outlets.insert(outlet);
      ++s->batches;
      auto& label = b.at("label");
      for (int64_t i = 0; i < label.elements(); ++i)
        s->labels.push_back(label.data_as<int64_t>()[i]);
    },
    [=](job_progress_atom, const job_progress&) {
      std::lock_guard<std::mutex> guard{s->mtx};
      ++s->progress;
    },
    [=](job_done_atom, const run_result& r) {
      {
        std::lock_guard<std::mutex> guard{s->mtx};
        ++s->done;
        s->result = r;
      }
      self->quit();
    },
  };
}

using release_atom = caf::atom_constant<caf::atom("release")>;

// Answers outlet batches only every 30 ms, all at once.
caf::behavior holding_app(caf::stateful_actor<std::vector<caf::response_promise>>* self,
                          std::shared_ptr<seen> s) {
  return {
    [=](outlet_atom, const std::string&, const batch& b) {
      if (self->state.empty())
        self->delayed_send(self, std::chrono::milliseconds{30},
                           release_atom::value);
      self->state.push_back(self->make_response_promise());
      std::lock_guard<std::mutex> guard{s->mtx};
      s->held_max = std::max(s->held_max, self->state.size());
      s->labels.push_back(b.at("label").data_as<int64_t>()[0]);
    },
    [=](release_atom) {
      for (auto& rp : self->state)
        rp.deliver(caf::unit);
      self->state.clear();
    },
    [=](job_done_atom, const run_result&) { self->quit(); },
  };
}

// label + options.add, as a new tensor.
map_fn make_add(const stage_info&, const stage_options& o) {
  auto add = o.get_int("add", 1);
  return [add](batch&& b) {
    auto& in = b.at("label");
    auto out = tensor::allocate(dtype::i64, in.shape());
    for (int64_t i = 0; i < in.elements(); ++i)
      out.mutable_data_as<int64_t>()[i] = in.data_as<int64_t>()[i] + add;
    b.set("label", std::move(out));
    return std::move(b);
  };
}

// A source written by the application: `count` items of one record each.
class counting_source : public stage_logic {
public:
  counting_source(const stage_info&, const stage_options& o)
    : count_{o.get_int("count", 10)} {}

  bool produce(emitter& out) override {
    if (next_ == count_)
      return false;
    batch b;
    b.seq = static_cast<uint64_t>(next_);
    auto t = tensor::allocate(dtype::i64, {1});
    t.mutable_data_as<int64_t>()[0] = next_++;
    b.set("label", std::move(t));
    out.push(std::move(b));
    return true;
  }

private:
  int64_t count_;
  int64_t next_ = 0;
};

// Runs `topo` with `app_handle` as listener and as the actor of the outlet
// "out", and waits for the job and for the actor, which quits on
// (job_done_atom, run_result).
run_result run_and_wait(caf::actor_system& sys, const registry& reg,
                        const loaded_topology& topo, caf::actor app_handle,
                        job_options opts = {}) {
  opts.listener = app_handle;
  opts.outlets["out"] = app_handle;
  auto j = job::start(sys, topo, reg, std::move(opts));
  auto r = j.wait_for(std::chrono::seconds{60});
  if (!r) {
    j.abort("test time limit");
    FAIL("the job did not end within 60 s");
  }
  caf::scoped_actor self{sys};
  self->monitor(app_handle);
  bool quit = false;
  self->receive([&](caf::down_msg&) { quit = true; },
                caf::after(std::chrono::seconds{10}) >> [] {});
  if (!quit)
    caf::anon_send_exit(app_handle, caf::exit_reason::kill);
  CHECK(quit);
  return *r;
}

run_result run_and_wait(test::fixture& f, const loaded_topology& topo,
                        caf::actor app_handle, job_options opts = {}) {
  return run_and_wait(f.sys, f.reg, topo, std::move(app_handle),
                      std::move(opts));
}

} // namespace

TEST_CASE("a custom map stage's output reaches the application's actor, "
          "with progress and the end of the job as messages") {
  test::fixture f;
  f.reg.add(map_stage("plus", "adds an option to the labels", {"add"},
                      make_add));
  pipeline p{"embed-test"};
  p.runtime().set_metrics_interval_s(0.05);
  auto& src = p.add("src", "test_source");
  (*src.mutable_options())["items"] = "1000";
  (*src.mutable_options())["work_ns"] = "300000"; // 0.3 s in all
  auto& plus = p.add("plus", "plus", {"src"});
  plus.set_replicas(2);
  (*plus.mutable_options())["add"] = "5";
  p.add("out", "outlet", {"plus"}).mutable_outlet()->set_in_flight(2);
  auto topo = p.build(f.reg);

  auto s = std::make_shared<seen>();
  auto a = f.sys.spawn(app, s);
  job_options opts;
  opts.progress_interval = std::chrono::milliseconds{50};
  auto r = run_and_wait(f, topo, a, opts);
  REQUIRE(r.ok);

  std::lock_guard<std::mutex> guard{s->mtx};
  CHECK(s->done == 1);
  CHECK(s->result.ok);
  CHECK(s->progress >= 1);
  CHECK(s->outlets == std::set<std::string>{"out"});
  // Every record, transformed by the custom stage, exactly once.
  auto labels = s->labels;
  std::sort(labels.begin(), labels.end());
  REQUIRE(labels.size() == 1000);
  for (int64_t i = 0; i < 1000; ++i)
    REQUIRE(labels[static_cast<size_t>(i)] == i + 5);
  // The result the actor got is the one wait() returned.
  CHECK(test::stats_of(s->result, "out[0]").records_in == 1000);
  CHECK(test::stats_of(r, "plus[1]").items_in
          + test::stats_of(r, "plus[0]").items_in
        == 1000);
}

TEST_CASE("an outlet never has more than in_flight batches unanswered") {
  test::fixture f;
  pipeline p;
  (*p.add("src", "test_source").mutable_options())["items"] = "30";
  p.add("out", "outlet", {"src"}).mutable_outlet()->set_in_flight(3);
  auto s = std::make_shared<seen>();
  auto a = f.sys.spawn(holding_app, s);
  auto r = run_and_wait(f, p.build(f.reg), a);
  REQUIRE(r.ok);
  std::lock_guard<std::mutex> guard{s->mtx};
  CHECK(s->labels.size() == 30);
  // The outlet sent three, then waited for the held answers.
  CHECK(s->held_max == 3);
}

TEST_CASE("outlet errors name the outlet and do not hang") {
  test::fixture f;
  pipeline p;
  (*p.add("src", "test_source").mutable_options())["items"] = "100000";
  p.add("out", "outlet", {"src"});
  auto topo = p.build(f.reg);

  SECTION("no actor for the outlet") {
    try {
      job::start(f.sys, topo, f.reg, {});
      FAIL("job::start accepted an outlet without an actor");
    } catch (const std::runtime_error& ex) {
      std::string what = ex.what();
      CHECK_THAT(what, Catch::Contains("out[0]"));
      CHECK_THAT(what, Catch::Contains("job_options::outlets[\"out\"]"));
    }
  }
  SECTION("the application's actor exits during the job") {
    auto s = std::make_shared<seen>();
    auto a = f.sys.spawn(app, s);
    job_options opts;
    opts.outlets["out"] = a;
    auto j = job::start(f.sys, topo, f.reg, opts);
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    auto r = j.wait_for(std::chrono::seconds{60});
    REQUIRE(r);
    CHECK_FALSE(r->ok);
    CHECK_THAT(r->error, Catch::Contains("out[0]"));
    CHECK_THAT(r->error, Catch::Contains("has exited"));
  }
  SECTION("an outlet placed on a node") {
    pipeline q;
    q.spec().add_host()->set_name("w1");
    q.spec().mutable_host(0)->set_address("127.0.0.1:1");
    q.add("src", "test_source");
    q.add("out", "outlet", {"src"}).add_hosts("w1");
    try {
      q.build(f.reg);
      FAIL("an outlet with hosts was accepted");
    } catch (const topology_invalid& ex) {
      CHECK_THAT(std::string{ex.what()}, Catch::Contains("remove its hosts"));
    }
  }
}

TEST_CASE("pipelines built in code are validated like topology files") {
  test::fixture f;
  f.reg.add(map_stage("scale", "", {"factor"},
                      [](const stage_info&, const stage_options& o) -> map_fn {
                        auto factor = o.get_double("factor", 1.0);
                        return [factor](batch&& b) {
                          (void)factor;
                          return std::move(b);
                        };
                      }));
  pipeline p{"checked"};
  p.add("src", "test_source");
  auto& scale = p.add("scale", "scale", {"src"});
  p.add("sink", "sink", {"scale"});

  auto problem = [&]() -> std::string {
    try {
      p.build(f.reg);
    } catch (const topology_invalid& ex) {
      CHECK_FALSE(ex.errors().empty());
      return ex.what();
    }
    return "";
  };
  CHECK(problem().empty());
  (*scale.mutable_options())["factor"] = "abc";
  CHECK_THAT(problem(),
             Catch::Contains("option 'factor': 'abc' is not a finite number"));
  (*scale.mutable_options())["factor"] = "0.5";
  (*scale.mutable_options())["factr"] = "2";
  CHECK_THAT(problem(), Catch::Contains("unknown option 'factr' (this stage "
                                        "type reads: factor)"));
  scale.mutable_options()->erase("factr");
  p.add("orphan", "sink", {"nowhere"});
  auto text = problem();
  CHECK_THAT(text, Catch::Contains("checked:"));
  CHECK_THAT(text, Catch::Contains("'nowhere' names a stage that does not "
                                   "exist"));
  CHECK_THROWS_AS(p.stage("nope"), std::out_of_range);
  CHECK_THROWS_AS(pipeline{}.build(f.reg), topology_invalid);
  // text() is a topology file the loader accepts as it is.
  p.spec().mutable_stage()->RemoveLast();
  CHECK(load_topology_text(p.text(), "again", f.reg).ok());
  // A check of the application's own that throws is a problem, not a crash.
  stage_type throwing = stage_type_of<counting_source>(
    "throwing", stage_kind::source, "");
  throwing.check = [](const topology::Stage&) -> std::string {
    throw std::runtime_error("cannot look at this stage");
  };
  f.reg.add(throwing);
  p.add("odd", "throwing");
  p.add("odd_sink", "sink", {"odd"});
  auto loaded = load_topology_text(p.text(), "again", f.reg);
  REQUIRE(loaded.errors.size() == 1);
  CHECK_THAT(loaded.errors[0].to_string(),
             Catch::Contains("stage 'odd' (throwing): cannot look at this "
                             "stage"));
  // Names are the registry's: a built-in name cannot be taken.
  CHECK_THROWS_AS(f.reg.add(map_stage("batcher", "", {}, make_add)),
                  std::invalid_argument);
}

TEST_CASE("stage_type_of runs an application's own stage_logic") {
  test::fixture f;
  f.reg.add(stage_type_of<counting_source>("counting", stage_kind::source,
                                           "counts", {"count"}));
  pipeline p;
  (*p.add("src", "counting").mutable_options())["count"] = "37";
  p.add("out", "outlet", {"src"});
  auto s = std::make_shared<seen>();
  auto a = f.sys.spawn(app, s);
  auto r = run_and_wait(f, p.build(f.reg), a);
  REQUIRE(r.ok);
  {
    std::lock_guard<std::mutex> guard{s->mtx};
    CHECK(s->labels.size() == 37);
    CHECK(s->done == 1);
  }
  (*p.stage("src").mutable_options())["cnt"] = "1";
  CHECK_THROWS_WITH(p.build(f.reg), Catch::Contains("unknown option 'cnt'"));
}

TEST_CASE("stage_options parse whole values and name the option they "
          "refuse") {
  topology::Stage s;
  auto& o = *s.mutable_options();
  o["n"] = "-42";
  o["x"] = "1e-3";
  o["b"] = "true";
  o["bad_n"] = "12x";
  o["blank_n"] = " 5";
  o["inf"] = "inf";
  o["bad_b"] = "yes";
  stage_options opts{s};
  CHECK(opts.get_int("n", 0) == -42);
  CHECK(opts.get_int("missing", 7) == 7);
  CHECK(opts.get_double("x", 0) == Approx(0.001));
  CHECK(opts.get_bool("b", false));
  CHECK(opts.get("missing", "d") == "d");
  CHECK_THROWS_WITH(opts.get_int("bad_n", 0),
                    "option 'bad_n': '12x' is not a whole number");
  CHECK_THROWS_WITH(opts.get_int("blank_n", 0),
                    "option 'blank_n': ' 5' is not a whole number");
  CHECK_THROWS_WITH(opts.get_double("inf", 0),
                    "option 'inf': 'inf' is not a finite number");
  CHECK_THROWS_WITH(opts.get_bool("bad_b", false),
                    "option 'bad_b': 'yes' is not true or false");
  CHECK_THROWS_WITH(opts.require("path"),
                    Catch::StartsWith("option 'path' is required"));
  CHECK_THROWS_WITH(opts.only({"n", "x"}),
                    Catch::Contains("(this stage type reads: n, x)"));
}

TEST_CASE("a custom stage runs on a node process of the application's own "
          "that registered it") {
  // The node: its own actor system and registry, with the custom type, and
  // a spawner published on a free port of 127.0.0.1 (what `actorflow node`
  // does with the built-in types only).
  std::atomic<int> made_on_node{0};
  auto plus = [](std::atomic<int>* made) {
    return map_stage("plus", "", {"add"},
                     [made](const stage_info& info, const stage_options& o) {
                       // (a null context: the check while loading)
                       if (info.context && made == nullptr)
                         throw std::runtime_error("made in the coordinator");
                       if (info.context && made != nullptr)
                         ++*made;
                       return make_add(info, o);
                     });
  };
  test::config node_cfg;
  enable_network(node_cfg);
  caf::actor_system node_sys{node_cfg};
  registry node_reg;
  register_builtin_stages(node_reg);
  node_reg.add(plus(&made_on_node));
  auto spawner = spawn_node_spawner(node_sys, node_reg);
  auto port = node_sys.middleman().publish(spawner, 0, "127.0.0.1");
  REQUIRE(port);

  // The coordinator: another actor system, whose registry knows the type
  // too (it validates the topology) but must not create it here.
  test::config cfg;
  enable_network(cfg);
  caf::actor_system sys{cfg};
  registry reg;
  register_builtin_stages(reg);
  reg.add(plus(nullptr));
  pipeline p;
  auto* host = p.spec().add_host();
  host->set_name("w1");
  host->set_address("127.0.0.1:" + std::to_string(*port));
  auto& src = p.add("src", "synthetic_source");
  src.mutable_synthetic_source()->set_records(500);
  src.mutable_synthetic_source()->set_records_per_item(10);
  auto& remote = p.add("plus", "plus", {"src"});
  (*remote.mutable_options())["add"] = "1000";
  remote.add_hosts("w1");
  p.add("out", "outlet", {"plus"});

  auto s = std::make_shared<seen>();
  auto r = run_and_wait(sys, reg, p.build(reg), sys.spawn(app, s));
  INFO(r.error);
  REQUIRE(r.ok);
  CHECK(made_on_node == 1);
  {
    std::lock_guard<std::mutex> guard{s->mtx};
    REQUIRE(s->labels.size() == 500);
    for (auto label : s->labels)
      CHECK(label >= 1000); // synthetic labels are 0..9, plus 1000
  }
  caf::anon_send_exit(spawner, caf::exit_reason::user_shutdown);
}
