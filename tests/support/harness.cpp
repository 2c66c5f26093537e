#include "tests/support/harness.hpp"

#include <fstream>
#include <future>
#include <stdexcept>
#include <thread>
#include <unistd.h>

#include <caf/atom.hpp>
#include <catch2/catch.hpp>

#include "actorflow/actors/builtin.hpp"
#include "actorflow/runtime/core/busy_work.hpp"
#include "actorflow/runtime/net/system.hpp"
#include "actorflow/runtime/stage/custom_stage.hpp"

namespace af::test {

config::config(size_t threads, const char* policy, bool network) {
  af::add_message_types(*this);
  engine_options opts;
  opts.threads = threads;
  opts.scheduler = policy;
  af::apply(opts, *this);
  if (network)
    af::enable_network(*this);
}

int64_t option(const topology::Stage& s, const std::string& key,
               int64_t fallback) {
  return stage_options{s}.get_int(key, fallback);
}

namespace {

int64_t replica_option(const topology::Stage& s, const stage_info& info,
                       const std::string& key) {
  return option(s, key + "_r" + std::to_string(info.replica),
                option(s, key, 0));
}

class test_source : public stage_logic {
public:
  test_source(const stage_info& info, const topology::Stage& s,
              std::shared_ptr<observations> obs)
    : obs_(std::move(obs)), items_(option(s, "items", 1000)),
      min_bytes_(option(s, "item_bytes", 64)),
      max_bytes_(option(s, "max_item_bytes", min_bytes_)),
      work_ns_(option(s, "work_ns", 0)), record_(option(s, "record", 0) != 0),
      stride_(info.replicas), next_(info.replica) {}

  bool produce(emitter& out) override {
    if (next_ >= items_)
      return false;
    busy_work(work_ns_);
    // Sizes cycle deterministically through [min, max].
    auto span = max_bytes_ - min_bytes_ + 1;
    auto size = min_bytes_ + (next_ * 7919) % span;
    auto x = tensor::allocate(dtype::u8, {1, size});
    std::fill_n(x.mutable_data_as<uint8_t>(), size,
                static_cast<uint8_t>(next_));
    auto label = tensor::allocate(dtype::i64, {1});
    *label.mutable_data_as<int64_t>() = next_;
    if (record_) {
      std::lock_guard<std::mutex> guard{obs_->mtx};
      obs_->produced.push_back(x.data());
    }
    batch b;
    b.seq = static_cast<uint64_t>(next_);
    b.set("x", std::move(x));
    b.set("label", std::move(label));
    out.push(std::move(b));
    next_ += stride_;
    return next_ < items_;
  }

private:
  std::shared_ptr<observations> obs_;
  int64_t items_, min_bytes_, max_bytes_, work_ns_;
  bool record_;
  int64_t stride_, next_;
};

class test_sink : public stage_logic {
public:
  test_sink(const stage_info& info, const topology::Stage& s,
            std::shared_ptr<observations> obs, bool forward)
    : obs_(std::move(obs)), label_(info.label()),
      work_ns_(replica_option(s, info, "work_ns")),
      sleep_us_(replica_option(s, info, "sleep_us")),
      fail_at_(option(s, "fail_at", -1)), record_(option(s, "record", 0) != 0),
      forward_(forward) {}

  void process(batch&& item, emitter& out) override {
    if (seen_++ == fail_at_)
      throw std::runtime_error("injected failure at item "
                               + std::to_string(fail_at_));
    busy_work(work_ns_);
    if (sleep_us_ > 0)
      std::this_thread::sleep_for(std::chrono::microseconds{sleep_us_});
    obs_->items.fetch_add(1);
    if (record_) {
      std::lock_guard<std::mutex> guard{obs_->mtx};
      obs_->labels.emplace_back(label_, *item.at("label").data_as<int64_t>());
      obs_->consumed.push_back(item.at("x").data());
    }
    if (forward_)
      out.push(std::move(item));
  }

private:
  std::shared_ptr<observations> obs_;
  std::string label_;
  int64_t work_ns_, sleep_us_, fail_at_;
  bool record_;
  bool forward_;
  int64_t seen_ = 0;
};

class collect_sink : public stage_logic {
public:
  collect_sink(const stage_info&, const topology::Stage&,
               std::shared_ptr<observations> obs)
    : obs_(std::move(obs)) {}

  void process(batch&& item, emitter&) override {
    std::lock_guard<std::mutex> guard{obs_->mtx};
    obs_->collected.push_back(std::move(item));
  }

private:
  std::shared_ptr<observations> obs_;
};

template <class Logic, class... Extra>
void add_test_type(registry& reg, const char* name, stage_kind kind,
                   std::shared_ptr<observations> obs, Extra... extra) {
  stage_type t;
  t.name = name;
  t.kind = kind;
  t.make = [obs, extra...](const stage_info& info, const topology::Stage& s) {
    return std::make_shared<Logic>(info, s, obs, extra...);
  };
  reg.add(std::move(t));
}

} // namespace

registry make_registry(std::shared_ptr<observations> obs) {
  registry reg;
  register_builtin_stages(reg);
  add_test_type<test_source>(reg, "test_source", stage_kind::source, obs);
  add_test_type<test_sink>(reg, "test_sink", stage_kind::sink, obs, false);
  add_test_type<test_sink>(reg, "test_map", stage_kind::transform, obs, true);
  add_test_type<collect_sink>(reg, "collect", stage_kind::sink, obs);
  return reg;
}

bool all_actors_exit(caf::actor_system& sys) {
  auto done =
    std::async(std::launch::async, [&] { sys.await_all_actors_done(); });
  return done.wait_for(std::chrono::seconds{10}) == std::future_status::ready;
}

run_result run_text(caf::actor_system& sys, const registry& reg,
                    const std::string& text, std::chrono::seconds limit,
                    job_options opts) {
  auto loaded = load_topology_text(text, "test.pbtxt", reg);
  for (auto& e : loaded.errors)
    UNSCOPED_INFO(e.to_string());
  REQUIRE(loaded.ok());
  auto j = job::start(sys, *loaded.topology, reg, std::move(opts));
  auto result = j.wait_for(limit);
  if (!result) {
    j.abort("test time limit");
    FAIL("job did not end within " << limit.count() << " s");
  }
  return *result;
}

const stage_stats& stats_of(const run_result& r, const std::string& label) {
  for (auto& s : r.final.stages)
    if (s.stage == label)
      return s;
  FAIL("no stats for " << label);
  throw std::logic_error("unreachable");
}

double metric_of(const run_result& r, const std::string& label,
                 const std::string& name) {
  for (auto& m : stats_of(r, label).metrics)
    if (m.name == name)
      return m.value;
  FAIL("replica " << label << " reports no metric " << name);
  throw std::logic_error("unreachable");
}

resumed_batches resume_between(const registry& reg,
                               const topology::Stage& stage,
                               const std::vector<batch>& items, size_t split) {
  auto* type = reg.find(stage.type());
  if (type == nullptr)
    throw std::invalid_argument("no stage type '" + stage.type() + "'");
  auto whole = type->make(stage_info{}, stage);
  auto first = type->make(stage_info{}, stage);
  resumed_batches out;
  out.resumed = type->make(stage_info{}, stage);
  collecting_emitter all, before, after;
  for (auto& item : items)
    whole->process(batch{item}, all);
  whole->finish(all);
  for (size_t k = 0; k < split && k < items.size(); ++k)
    first->process(batch{items[k]}, before);
  out.resumed->restore(first->snapshot());
  for (size_t k = split; k < items.size(); ++k)
    out.resumed->process(batch{items[k]}, after);
  out.resumed->finish(after);
  out.whole = std::move(all.items);
  out.joined = std::move(before.items);
  out.joined.insert(out.joined.end(), after.items.begin(), after.items.end());
  return out;
}

uint64_t rss_bytes() {
  std::ifstream in{"/proc/self/statm"};
  uint64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

} // namespace af::test
