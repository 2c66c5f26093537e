// libFuzzer target: the decoders of a checkpoint's stage parts. A stage
// replica's part is a "stage/1" state (runtime/stage/stage.cpp: epochs
// forwarded, epochs ended per input, the logic's own state; read with
// load_state, runtime/state/state_io.hpp) whose last field is the stage logic's
// snapshot, read by stage_logic::restore. Each input is decoded as a
// whole stage part and, as it is, by the restore of every built-in stage
// type with a state here (batcher, shuffle, take, skip, transform,
// synthetic_source, and cache twice: in memory, and spilling all but the
// first item to its spill file). A state must be refused with std::invalid_argument
// or restored into a logic that then processes, ends and finishes its
// stream without a crash, an exception other than a located error, UB or
// a runaway loop.
//
// Each input is also read as the coordinator's "job" part
// (runtime/job/job_part.hpp): a std::runtime_error naming the part, or a
// job_part that writes back to text that reads back the same. (The
// parameter-server shards' parts have their own target, fuzz_ps_snapshot.)
//
// AF_FUZZ_WRITE_SEEDS=DIR: writes real stage parts of those stages, made
// by their snapshot() after some items, to DIR and exits
// (tests/fuzz/corpus/README.md).
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "actorflow/actors/builtin.hpp"
#include "actorflow/runtime/job/job_part.hpp"
#include "actorflow/runtime/stage/registry.hpp"
#include "actorflow/runtime/state/state_io.hpp"
#include "tests/fuzz/fuzz_util.hpp"

namespace {

// Counts what a logic pushes; a restored logic must not run away.
struct counting_emitter : af::emitter {
  int64_t items = 0;
  void push(af::batch b) override {
    ++items;
    if (b.records() < 0 || items > 100000)
      __builtin_trap();
  }
  void end_epoch(uint64_t) override {}
};

const af::registry& reg() {
  static const af::registry r = [] {
    af::registry x;
    af::register_builtin_stages(x);
    return x;
  }();
  return r;
}

struct stage_case {
  const char* type;
  af::topology::Stage spec;
};

const std::vector<stage_case>& cases() {
  static const std::vector<stage_case> all = [] {
    std::vector<stage_case> v;
    af::topology::Stage s;
    s.mutable_batcher()->set_batch_size(4);
    v.push_back({"batcher", s});
    s.Clear();
    s.mutable_shuffle()->set_buffer_size(6);
    s.mutable_shuffle()->set_records_per_item(3);
    v.push_back({"shuffle", s});
    s.Clear();
    s.mutable_take()->set_count(7);
    v.push_back({"take", s});
    s.Clear();
    s.mutable_skip()->set_count(3);
    v.push_back({"skip", s});
    s.Clear();
    s.mutable_transform();
    v.push_back({"transform", s});
    s.Clear();
    auto* src = s.mutable_synthetic_source();
    src->set_records(10);
    src->set_record_bytes(4);
    src->set_records_per_item(3);
    src->set_epochs(2);
    v.push_back({"synthetic_source", s});
    s.Clear();
    s.mutable_cache()->set_epochs(3);
    v.push_back({"cache", s});
    s.mutable_cache()->set_max_memory_bytes(100);
    v.push_back({"cache", s});
    return v;
  }();
  return all;
}

std::shared_ptr<af::stage_logic> make(const stage_case& c) {
  af::stage_info info;
  info.name = c.type;
  info.type = c.type;
  info.seed = 5;
  auto* t = reg().find(c.type);
  if (t == nullptr)
    __builtin_trap();
  return t->make(info, c.spec);
}

// Five records: a float feature and a label.
af::batch item(uint64_t seq, uint64_t epoch) {
  af::batch b;
  b.seq = seq;
  b.epoch = epoch;
  auto x = af::tensor::allocate(af::dtype::f32, {5, 2});
  for (int i = 0; i < 10; ++i)
    x.mutable_data_as<float>()[i] = static_cast<float>(seq * 10 + i);
  auto y = af::tensor::allocate(af::dtype::i64, {5});
  for (int i = 0; i < 5; ++i)
    y.mutable_data_as<int64_t>()[i] = i;
  b.set("x", std::move(x));
  b.set("label", std::move(y));
  return b;
}

// What a replica does after a restore: go on with its stream.
void run_on(af::stage_logic& logic) {
  counting_emitter out;
  for (int i = 0; i < 50 && logic.produce(out); ++i) {
  }
  for (uint64_t seq = 0; seq < 3; ++seq)
    logic.process(item(seq, 0), out);
  logic.end_of_epoch(0, out);
  logic.process(item(3, 1), out);
  logic.finish(out);
  (void)logic.snapshot();
}

void restore_and_run(const stage_case& c, const std::string& state) {
  auto logic = make(c);
  try {
    logic->restore(state);
  } catch (const std::invalid_argument&) {
    return; // refused, as documented
  }
  try {
    run_on(*logic);
  } catch (const std::runtime_error&) {
    // a stage error (e.g. restored records whose fields do not match the
    // new items'): the replica fails the job with it, as it should
  } catch (const std::invalid_argument&) {
  }
}

void check_job_part(const std::string& bytes) {
  af::job_part p;
  try {
    p = af::parse_job_part(bytes, "ckpt/job.part");
  } catch (const std::runtime_error& e) {
    if (std::string_view{e.what()}.substr(0, 14) != "ckpt/job.part:")
      __builtin_trap(); // the error names the part
    return;
  }
  auto text = af::format_job_part(p);
  auto again = af::parse_job_part(text, "again"); // must not throw
  if (af::format_job_part(again) != text || again.topology != p.topology
      || again.step != p.step || again.ended != p.ended
      || again.steps != p.steps || again.lost != p.lost)
    __builtin_trap();
}

void write_seeds(const std::string& dir) {
  af::job_part job;
  job.topology = "ctr_embedding";
  job.step = 1200;
  job.ended = {{"read[0]", true}, {"train[0]", false}, {"train[1]", false}};
  job.steps = {{"read[0]", 0}, {"train[0]", 610}, {"train[1]", 590}};
  job.lost = {"train[2]"};
  af::fuzz::write_file(dir + "/job", af::format_job_part(job));
  for (auto& c : cases()) {
    auto logic = make(c);
    counting_emitter out;
    std::vector<std::string> states{logic->snapshot()};
    bool cache = std::string{c.type} == "cache";
    // (A cache produces only once its input ended: it replays.)
    for (int i = 0; !cache && i < 4 && logic->produce(out); ++i) {
    }
    logic->process(item(0, 0), out);
    logic->process(item(1, 0), out);
    states.push_back(logic->snapshot());
    if (cache) {
      // and part-way through its first replay.
      logic->process(item(2, 0), out);
      for (int i = 0; i < 2; ++i)
        logic->produce(out);
      states.push_back(logic->snapshot());
    }
    auto name = std::string{c.type}
                + (c.spec.has_cache() && c.spec.cache().has_max_memory_bytes()
                     ? "_spilled"
                     : "");
    for (size_t i = 0; i < states.size(); ++i) {
      // As the replica's stage part holds it (runtime/stage/stage.cpp).
      auto part = af::save_state("stage/1", uint64_t{i}, std::vector<uint64_t>{i},
                                 states[i]);
      af::fuzz::write_file(dir + "/" + name + "_" + std::to_string(i), part);
      make(c)->restore(states[i]); // a seed must be valid: throws if not
    }
  }
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  return af::fuzz::write_seeds_or_fuzz(write_seeds);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes{reinterpret_cast<const char*>(data), size};
  check_job_part(bytes);
  // The replica's wrapper; its logic state goes on to the logics.
  std::string inner;
  try {
    uint64_t forwarded = 0;
    std::vector<uint64_t> ended;
    af::load_state(bytes, "stage/1", forwarded, ended, inner);
  } catch (const std::invalid_argument&) {
    inner.clear();
  }
  for (auto& c : cases()) {
    restore_and_run(c, bytes);
    if (!inner.empty())
      restore_and_run(c, inner);
  }
  return 0;
}
