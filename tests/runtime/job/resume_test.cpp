// Checkpoints taken while a job runs and `resume`: the cut is consistent,
// so across a stop or a crash every record of every epoch is consumed
// exactly once (counted by a sink whose state is part of the checkpoint).
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <optional>
#include <thread>

#include "actorflow/actors/sources/strided_source.hpp"
#include "actorflow/runtime/state/checkpoint.hpp"
#include "actorflow/runtime/state/state_io.hpp"
#include "tests/support/harness.hpp"

using namespace af;
using namespace af::test;

namespace {

// Records 0..records-1 of every epoch e as tensor "id" (i64) = e * 10^6 +
// record, spread over the replicas like the built-in synthetic sources.
// (The id holds the epoch because items of two epochs may mix downstream
// while one reader replica is an epoch ahead of the other.)
class id_source : public strided_source {
public:
  id_source(const stage_info& info, const topology::Stage& s)
    : strided_source(info, option(s, "records", 1000), 10,
                     option(s, "epochs", 3)) {}

private:
  void fill(int64_t first, int64_t stride, int64_t n, batch& b) override {
    auto t = tensor::allocate(dtype::i64, {n});
    auto* p = t.mutable_data_as<int64_t>();
    for (int64_t i = 0; i < n; ++i)
      p[i] = static_cast<int64_t>(b.epoch) * 1000000 + first + i * stride;
    b.set("id", std::move(t));
  }
};

// What the recorders hold at the end of a job, by replica label.
struct recorded {
  std::mutex mtx;
  std::map<std::string, std::vector<int64_t>> ids;
};

// A sink that keeps every id it consumes as its state: the state
// is checkpointed and restored, so after a resume it holds what the whole
// job consumed. Reports "step" = items consumed (checkpoint.every_steps).
// With by_item_epoch (behind a cache, whose replays repeat the first
// epoch's ids) it keeps item epoch * 10^6 + id.
class id_recorder : public stage_logic {
public:
  id_recorder(const stage_info& info, std::shared_ptr<recorded> out,
              int64_t sleep_us, bool by_item_epoch)
    : label_(info.label()),
      out_(std::move(out)),
      sleep_us_(sleep_us),
      by_item_epoch_(by_item_epoch) {}

  void process(batch&& item, emitter&) override {
    auto& t = item.at("id");
    auto base = by_item_epoch_ ? static_cast<int64_t>(item.epoch) * 1000000
                               : 0;
    for (int64_t i = 0; i < t.elements(); ++i)
      seen_.push_back(base + t.template data_as<int64_t>()[i]);
    ++steps_;
    if (sleep_us_ > 0)
      std::this_thread::sleep_for(std::chrono::microseconds{sleep_us_});
  }

  void finish(emitter&) override {
    std::lock_guard<std::mutex> guard{out_->mtx};
    out_->ids[label_] = seen_;
  }

  uint64_t quiesce() override { return steps_; }

  std::string snapshot() const override {
    return save_state("id_recorder/1", seen_, steps_);
  }

  void restore(const std::string& state) override {
    load_state(state, "id_recorder/1", seen_, steps_);
  }

  void metrics(std::vector<metric>& out) const override {
    out.push_back({"step", static_cast<double>(steps_)});
  }

private:
  std::string label_;
  std::shared_ptr<recorded> out_;
  int64_t sleep_us_;
  bool by_item_epoch_;
  std::vector<int64_t> seen_;
  uint64_t steps_ = 0;
};

struct resume_fixture : fixture {
  std::shared_ptr<recorded> rec = std::make_shared<recorded>();
  std::string dir;

  resume_fixture() {
    dir = (std::filesystem::temp_directory_path()
           / ("af-resume-" + std::to_string(::getpid()) + "-"
              + std::to_string(reinterpret_cast<uintptr_t>(this))))
            .string();
    std::filesystem::remove_all(dir);
    stage_type src;
    src.name = "id_source";
    src.kind = stage_kind::source;
    src.make = [](const stage_info& info, const topology::Stage& s) {
      return std::make_shared<id_source>(info, s);
    };
    reg.add(src);
    stage_type sink;
    sink.name = "id_recorder";
    sink.kind = stage_kind::sink;
    sink.blocking = true;
    auto out = rec;
    sink.make = [out](const stage_info& info, const topology::Stage& s) {
      return std::make_shared<id_recorder>(info, out,
                                           option(s, "sleep_us", 0),
                                           option(s, "by_item_epoch", 0) != 0);
    };
    reg.add(sink);
    // A stage whose state is not checkpointed (the topology check refuses
    // it in a job with checkpoints).
    stage_type forgetful;
    forgetful.name = "forgetful";
    forgetful.kind = stage_kind::transform;
    forgetful.no_checkpoints = "it keeps no state";
    forgetful.make = [](const stage_info&, const topology::Stage&) {
      return std::make_shared<stage_logic>();
    };
    reg.add(forgetful);
  }

  ~resume_fixture() { std::filesystem::remove_all(dir); }

  // read (2 replicas, 2000 records, `epochs`) [-> a cache with `cache` in
  // its block] -> shuffle -> batch -> 2 recording sinks (sleeping
  // `sleep_us` per item; by item epoch behind a cache), and `checkpoint`.
  std::string pipeline(const std::string& epochs,
                       const std::optional<std::string>& cache,
                       const std::string& sleep_us,
                       const std::string& checkpoint) const {
    std::string from = cache ? "cache" : "read";
    return R"(
      runtime { metrics_interval_s: 0.05 }
      stage { name: "read" type: "id_source" replicas: 2
              options { key: "records" value: "2000" }
              options { key: "epochs" value: ")"
           + epochs + R"(" } } )"
           + (cache ? R"(
      stage { name: "cache" type: "cache" input { stage: "read" }
              cache { )" + *cache + " } }"
                    : std::string{})
           + R"(
      stage { name: "shuffle" type: "shuffle" input { stage: ")"
           + from + R"(" }
              shuffle { buffer_size: 300 records_per_item: 16 } }
      stage { name: "batch" type: "batcher" input { stage: "shuffle" }
              batcher { batch_size: 32 } }
      stage { name: "sink" type: "id_recorder" replicas: 2
              input { stage: "batch" window: 2 }
              options { key: "sleep_us" value: ")"
           + sleep_us + R"(" }
              options { key: "by_item_epoch" value: ")"
           + (cache ? "1" : "0") + R"(" } }
      checkpoint { dir: ")"
           + dir + "\" " + checkpoint + " }";
  }

  std::string topology(const std::string& checkpoint) const {
    return pipeline("3", std::nullopt, "10000", checkpoint);
  }

  job start(const std::string& text, bool resume) {
    auto loaded = load_topology_text(text, "t", reg);
    REQUIRE(loaded.ok());
    job_options opts;
    opts.resume = resume;
    return job::start(sys, *loaded.topology, reg, opts);
  }

  // Every (epoch, id) the recorders hold, with how often.
  std::map<int64_t, int> counts() {
    std::map<int64_t, int> n;
    std::lock_guard<std::mutex> guard{rec->mtx};
    for (auto& [label, ids] : rec->ids)
      for (auto id : ids)
        ++n[id];
    return n;
  }

  // Every record of the 3 epochs exactly once.
  void check_exactly_once() {
    auto n = counts();
    int missing = 0, twice = 0;
    for (int64_t e = 0; e < 3; ++e)
      for (int64_t i = 0; i < 2000; ++i) {
        auto it = n.find(e * 1000000 + i);
        if (it == n.end())
          ++missing;
        else if (it->second > 1)
          ++twice;
      }
    CHECK(missing == 0);
    CHECK(twice == 0);
    CHECK(n.size() == 6000);
  }
};

} // namespace

TEST_CASE_METHOD(resume_fixture,
                 "a job stopped at a checkpoint resumes without losing or "
                 "repeating a record",
                 "[checkpoint]") {
  auto text = topology("every_steps: 1000000");
  {
    auto j = start(text, false);
    std::this_thread::sleep_for(std::chrono::milliseconds{400});
    j.stop(); // takes a checkpoint and ends at its cut
    auto r = j.wait_for(std::chrono::seconds{30});
    REQUIRE(r);
    REQUIRE(r->ok);
    CHECK(r->stopped);
    CHECK(r->checkpoints == 1);
  }
  checkpoint_store store{dir};
  REQUIRE(store.steps().size() == 1);
  // The first run stopped part-way (the whole job is ~188 steps).
  CHECK(store.steps()[0] > 0);
  CHECK(store.steps()[0] < 150);
  auto j = start(text, true);
  auto r = j.wait_for(std::chrono::seconds{60});
  REQUIRE(r);
  REQUIRE(r->ok);
  CHECK(r->resumed_step == store.steps()[0]);
  check_exactly_once();
  // and the final checkpoint was taken at the end
  CHECK(r->checkpoints == 1);
  CHECK(store.steps().back() >= 180);
  REQUIRE(all_actors_exit(sys));
}

TEST_CASE_METHOD(resume_fixture,
                 "a job that dies after a periodic checkpoint resumes from "
                 "it: records consumed after the cut are consumed again, "
                 "once",
                 "[checkpoint]") {
  auto text = topology("every_steps: 15 at_end: false keep: 2");
  {
    auto j = start(text, false);
    checkpoint_store store{dir};
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{20};
    while (store.steps().size() < 2
           && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds{20});
    REQUIRE(store.steps().size() >= 2);
    // A crash: everything is killed at once, whatever is in flight.
    j.abort("simulated crash");
    auto r = j.wait_for(std::chrono::seconds{30});
    REQUIRE(r);
    CHECK_FALSE(r->ok);
    CHECK(r->checkpoints >= 2);
  }
  checkpoint_store store{dir};
  auto steps = store.steps();
  CHECK(steps.size() == 2); // keep: 2
  rec->ids.clear();
  auto j = start(text, true);
  auto r = j.wait_for(std::chrono::seconds{60});
  REQUIRE(r);
  REQUIRE(r->ok);
  CHECK(r->resumed_step == steps.back());
  CHECK(r->resumed_step >= 30);
  check_exactly_once();
  REQUIRE(all_actors_exit(sys));
}

TEST_CASE_METHOD(resume_fixture,
                 "resume refuses a checkpoint of another topology and "
                 "starts afresh when there is none",
                 "[checkpoint]") {
  {
    // No checkpoint yet: a plain run.
    auto j = start(topology(""), true);
    auto r = j.wait_for(std::chrono::seconds{60});
    REQUIRE(r);
    REQUIRE(r->ok);
    CHECK(r->resumed_from.empty());
    check_exactly_once();
    CHECK(r->checkpoints == 1); // at the end
  }
  // Other replica counts: refused, naming the replica.
  for (auto count : {"1", "3"}) {
    auto other = topology("");
    auto from = std::string{"type: \"id_recorder\" replicas: 2"};
    auto at = other.find(from);
    REQUIRE(at != std::string::npos);
    other.replace(at, from.size(),
                  std::string{"type: \"id_recorder\" replicas: "} + count);
    auto loaded = load_topology_text(other, "t", reg);
    REQUIRE(loaded.ok());
    job_options opts;
    opts.resume = true;
    CHECK_THROWS_WITH(job::start(sys, *loaded.topology, reg, opts),
                      Catch::Contains(count == std::string{"1"}
                                        ? "'sink[1]', which this topology "
                                          "does not have"
                                        : "does not know stage replica "
                                          "'sink[2]'"));
  }
  REQUIRE(all_actors_exit(sys));
}

TEST_CASE_METHOD(resume_fixture,
                 "a topology with checkpoints refuses stages whose state is "
                 "not checkpointed",
                 "[checkpoint]") {
  auto text = topology("") + R"(
    stage { name: "mid" type: "forgetful" input { stage: "other" } }
    stage { name: "other" type: "id_source" }
    stage { name: "tail" type: "id_recorder" input { stage: "mid" } }
  )";
  auto loaded = load_topology_text(text, "t.pbtxt", reg);
  REQUIRE_FALSE(loaded.ok());
  std::string all;
  for (auto& e : loaded.errors)
    all += e.to_string() + "\n";
  CHECK_THAT(all, Catch::Contains("stage 'mid' (forgetful) cannot be "
                                  "checkpointed: it keeps no state"));
  auto bad = topology("keep: 0 every_steps: -1");
  loaded = load_topology_text(bad, "t.pbtxt", reg);
  REQUIRE_FALSE(loaded.ok());
  all.clear();
  for (auto& e : loaded.errors)
    all += e.to_string() + "\n";
  CHECK_THAT(all, Catch::Contains("checkpoint.keep must be >= 1"));
  CHECK_THAT(all, Catch::Contains("checkpoint.every_steps must be >= 0"));
}

namespace {

// The cache's place in a checkpoint: its epoch, the items replayed of it,
// and how many items it holds; or that it had ended (no part of its own).
struct cache_cut {
  bool ended = false;
  uint64_t epoch = 0;
  uint64_t next = 0;
  size_t items = 0;
};

// Makes `step` the newest checkpoint in `dir`: a copy of `all`'s
// checkpoints up to it.
void keep_up_to(const std::string& all, const std::string& dir,
                uint64_t step) {
  std::filesystem::remove_all(dir);
  std::filesystem::copy(all, dir, std::filesystem::copy_options::recursive);
  checkpoint_store store{dir};
  for (auto s : store.steps())
    if (s > step)
      std::filesystem::remove_all(store.path_of(s));
}

cache_cut cache_state_at(const std::string& all, const std::string& dir,
                         uint64_t step) {
  keep_up_to(all, dir, step);
  auto c = checkpoint_store{dir}.latest();
  REQUIRE(c);
  REQUIRE(c->step == step);
  for (auto& part : c->parts)
    if (part.name == "cache[0]") {
      uint64_t forwarded = 0;
      std::vector<uint64_t> ended;
      std::string logic;
      load_state(part.bytes, "stage/1", forwarded, ended, logic);
      std::vector<batch> items;
      uint64_t seq = 0, records = 0;
      cache_cut cut;
      load_state(logic, "cache/1", items, cut.epoch, cut.next, seq, records);
      cut.items = items.size();
      return cut;
    }
  return cache_cut{true};
}

} // namespace

TEST_CASE_METHOD(resume_fixture,
                 "a cache resumes from a cut in its first pass and from one "
                 "in a replayed epoch, in memory and spilled",
                 "[checkpoint]") {
  // max_memory_bytes 1000 keeps a dozen of the 200 items in memory and
  // spills the rest.
  auto memory = GENERATE(as<std::string>{}, "", "max_memory_bytes: 1000");
  CAPTURE(memory);
  auto text = pipeline("1", "epochs: 3 " + memory, "5000",
                       "every_steps: 8 keep: 1000 at_end: false");
  {
    // The whole job (188 steps), with a checkpoint every 8 steps (about
    // every 30: the pipeline pauses for each cut).
    auto j = start(text, false);
    auto r = j.wait_for(std::chrono::seconds{60});
    REQUIRE(r);
    REQUIRE(r->ok);
    check_exactly_once();
  }
  auto all = dir + "-all";
  std::filesystem::remove_all(all);
  std::filesystem::rename(dir, all);
  auto steps = checkpoint_store{all}.steps();
  REQUIRE(steps.size() >= 4);
  // From the latest cut inside a replayed epoch, part-way through it, and
  // from the latest cut of the first pass (later checkpoints removed).
  std::optional<uint64_t> in_replay, in_first;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    auto cut = cache_state_at(all, dir, *it);
    if (cut.ended)
      continue;
    if (!in_replay && cut.epoch >= 1 && cut.epoch < 3 && cut.next > 0
        && cut.next < cut.items)
      in_replay = *it;
    if (!in_first && cut.epoch == 0 && cut.items > 0)
      in_first = *it;
  }
  REQUIRE(in_replay);
  REQUIRE(in_first);
  for (auto step : {*in_replay, *in_first}) {
    CAPTURE(step);
    keep_up_to(all, dir, step);
    rec->ids.clear();
    auto j = start(text, true);
    auto r = j.wait_for(std::chrono::seconds{60});
    REQUIRE(r);
    REQUIRE(r->ok);
    CHECK(r->resumed_step == step);
    check_exactly_once();
  }
  std::filesystem::remove_all(all);
  REQUIRE(all_actors_exit(sys));
}
