// bench/stream_overhead: what the stream protocol costs.
//
// 1. items/s through source -> 4 pass-through stages -> sink at windows 1,
//    8 and 64, with 64-byte and 1 MiB items;
// 2. next to it, in the same run, a plain CAF send loop between two actors
//    in the same process (no credit, no stages) with the same items;
// 3. CAF binary serialize / deserialize GB/s of a 4 MiB tensor.
//
// Items share one pre-built buffer (as local actors do: zero-copy), so the
// numbers are the per-message cost of the machinery, not of memcpy.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include "actorflow/actors/builtin.hpp"
#include "actorflow/runtime/job/job.hpp"
#include "actorflow/runtime/net/system.hpp"
#include "actorflow/runtime/topology/topology.hpp"

using namespace af;
using clock_type = std::chrono::steady_clock;

namespace {

batch make_item(int64_t bytes) {
  auto x = tensor::allocate(dtype::u8, {1, bytes});
  std::fill_n(x.mutable_data_as<uint8_t>(), bytes, uint8_t{7});
  batch b;
  b.set("x", std::move(x));
  return b;
}

// Emits `count` copies of one item; the copies share its buffer.
class shared_item_source : public stage_logic {
public:
  shared_item_source(int64_t count, int64_t bytes)
    : left_(count), item_(make_item(bytes)) {}
  bool produce(emitter& out) override {
    if (left_-- <= 0)
      return false;
    out.push(item_);
    return left_ > 0;
  }

private:
  int64_t left_;
  batch item_;
};

double chain_items_per_s(caf::actor_system& sys, registry& reg, int64_t count,
                         int64_t bytes, int64_t window) {
  std::string text = "stage { name: \"src\" type: \"bench_source\" "
                     "options { key: \"count\" value: \""
                     + std::to_string(count)
                     + "\" } options { key: \"bytes\" "
                       "value: \""
                     + std::to_string(bytes) + "\" } }\n";
  std::string prev = "src";
  for (int i = 1; i <= 4; ++i) {
    auto name = "pass" + std::to_string(i);
    text += "stage { name: \"" + name
            + "\" type: \"transform\" input { stage: "
              "\""
            + prev + "\" window: " + std::to_string(window)
            + " } transform { touch_payload: false } }\n";
    prev = name;
  }
  text += "stage { name: \"sink\" type: \"sink\" input { stage: \"" + prev
          + "\" window: " + std::to_string(window) + " } }\n";
  auto loaded = load_topology_text(text, "bench", reg);
  if (!loaded.ok())
    throw std::runtime_error(loaded.errors.front().to_string());
  auto start = clock_type::now();
  auto j = job::start(sys, *loaded.topology, reg);
  auto r = j.wait();
  auto secs = std::chrono::duration<double>(clock_type::now() - start).count();
  if (!r.ok || r.final.items != static_cast<uint64_t>(count))
    throw std::runtime_error("chain run failed: " + r.error);
  return static_cast<double>(count) / secs;
}

struct receiver_state {
  int64_t left = 0;
  std::shared_ptr<std::promise<void>> done;
};

caf::behavior receiver(caf::stateful_actor<receiver_state>* self, int64_t count,
                       std::shared_ptr<std::promise<void>> done) {
  self->state.left = count;
  self->state.done = std::move(done);
  return {
    [=](const batch&) {
      if (--self->state.left == 0) {
        self->state.done->set_value();
        self->quit();
      }
    },
  };
}

caf::behavior sender(caf::event_based_actor* self, caf::actor to, int64_t count,
                     int64_t bytes) {
  auto item = make_item(bytes);
  return {
    [=](int) {
      for (int64_t i = 0; i < count; ++i)
        self->send(to, item);
      self->quit();
    },
  };
}

double plain_items_per_s(caf::actor_system& sys, int64_t count, int64_t bytes) {
  auto done = std::make_shared<std::promise<void>>();
  auto fut = done->get_future();
  auto rcv = sys.spawn(receiver, count, done);
  auto snd = sys.spawn(sender, rcv, count, bytes);
  auto start = clock_type::now();
  caf::anon_send(snd, 1);
  fut.wait();
  auto secs = std::chrono::duration<double>(clock_type::now() - start).count();
  return static_cast<double>(count) / secs;
}

constexpr size_t payload_bytes = 4 << 20;

double gb_per_s(int reps, clock_type::time_point start) {
  auto secs = std::chrono::duration<double>(clock_type::now() - start).count();
  return static_cast<double>(reps) * payload_bytes / 1e9 / secs;
}

// Serializes `value` `reps` times into `buf`; returns GB/s of payload.
template <class T>
double serialize_gb_per_s(T& value, int reps, std::vector<char>& buf) {
  buf.reserve(payload_bytes + 1024);
  auto start = clock_type::now();
  for (int i = 0; i < reps; ++i) {
    buf.clear();
    caf::binary_serializer sink{nullptr, buf};
    if (sink(value))
      throw std::runtime_error("serialize failed");
  }
  return gb_per_s(reps, start);
}

// A 4 MiB tensor (one raw block each way) and, for comparison, the same
// 4 MiB as std::vector<float>, which CAF serializes element by element.
struct serialization_result {
  double tensor_out, tensor_in, floats_out;
};

serialization_result serialization_gb_per_s(int reps) {
  std::vector<char> buf;
  batch b = make_item(payload_bytes);
  serialization_result r{};
  r.tensor_out = serialize_gb_per_s(b, reps, buf);
  auto start = clock_type::now();
  for (int i = 0; i < reps; ++i) {
    batch back;
    caf::binary_deserializer source{nullptr, buf};
    if (source(back))
      throw std::runtime_error("deserialize failed");
  }
  r.tensor_in = gb_per_s(reps, start);
  std::vector<float> values(payload_bytes / sizeof(float), 1.5f);
  r.floats_out = serialize_gb_per_s(values, std::max(3, reps / 10), buf);
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"Stream protocol overhead: a 4-stage pass-through chain next "
               "to a plain CAF send loop"};
  int64_t items = 200000;
  int reps = 5;
  size_t threads = 2;
  std::string scheduler = "sharing";
  app.add_option("--items", items, "Items per run")->capture_default_str();
  app.add_option("--reps", reps, "Run pairs per cell (medians are reported)")
    ->capture_default_str();
  app.add_option("--threads", threads, "Scheduler threads")
    ->capture_default_str();
  app.add_option("--scheduler", scheduler, "stealing or sharing")
    ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  caf::actor_system_config cfg;
  add_message_types(cfg);
  apply(engine_options{threads, scheduler}, cfg);
  caf::actor_system sys{cfg};
  registry reg;
  register_builtin_stages(reg);
  stage_type src;
  src.name = "bench_source";
  src.kind = stage_kind::source;
  src.make = [](const stage_info&, const topology::Stage& s) {
    return std::make_shared<shared_item_source>(
      std::stoll(s.options().at("count")), std::stoll(s.options().at("bytes")));
  };
  reg.add(src);

  std::printf("# stream_overhead: %lld items per run, medians of %d run "
              "pairs, %zu "
              "threads, %s scheduler\n\n",
              static_cast<long long>(items), reps, threads, scheduler.c_str());
  std::printf("| item size | window | chain items/s | plain send items/s "
              "| chain / plain |\n|---|---|---|---|---|\n");
  for (int64_t bytes : {int64_t{64}, int64_t{1} << 20}) {
    for (int64_t window : {1, 8, 64}) {
      // Plain and chain runs alternate, so a slow spell of the machine hits
      // both sides of a ratio; the ratio is the median of per-pair ratios.
      std::vector<double> chain_runs, plain_runs, ratios;
      for (int i = 0; i < reps; ++i) {
        plain_runs.push_back(plain_items_per_s(sys, items, bytes));
        chain_runs.push_back(chain_items_per_s(sys, reg, items, bytes, window));
        ratios.push_back(chain_runs.back() / plain_runs.back());
      }
      std::printf("| %s | %lld | %.0f | %.0f | %.1f%% |\n",
                  bytes == 64 ? "64 B" : "1 MiB",
                  static_cast<long long>(window), median(chain_runs),
                  median(plain_runs), 100.0 * median(ratios));
      std::fflush(stdout);
    }
  }
  auto ser = serialization_gb_per_s(std::max(10, reps * 20));
  std::printf("\n| 4 MiB payload | GB/s |\n|---|---|\n"
              "| af::tensor serialize | %.2f |\n"
              "| af::tensor deserialize | %.2f |\n"
              "| std::vector<float> serialize (CAF, per element) | %.2f |\n",
              ser.tensor_out, ser.tensor_in, ser.floats_out);
  return 0;
}
