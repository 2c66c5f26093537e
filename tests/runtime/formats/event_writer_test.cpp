// TensorBoard event files (runtime/formats/event_writer.hpp, docs/monitoring.md).
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>

#include "actorflow/actors/training/tensorboard_writer.hpp"
#include "actorflow/proto/event.pb.h"
#include "actorflow/runtime/formats/event_writer.hpp"
#include "actorflow/runtime/formats/tfrecord_reader.hpp"
#include "tests/support/temp_dir.hpp"

using namespace af;
using af::test::temp_dir;

namespace {

std::string bytes_of(std::initializer_list<unsigned> list) {
  std::string out;
  for (auto b : list)
    out.push_back(static_cast<char>(b));
  return out;
}

// Every record of an event file, parsed.
std::vector<tf::Event> read_events(const std::string& path) {
  tfrecord_reader r;
  REQUIRE(r.open(path, {}));
  std::vector<tf::Event> out;
  std::string_view rec;
  while (r.next_view(rec) == read_status::ok) {
    tf::Event e;
    REQUIRE(e.ParseFromArray(rec.data(), static_cast<int>(rec.size())));
    out.push_back(std::move(e));
  }
  return out;
}

} // namespace

TEST_CASE("the file-version event is framed byte for byte as TensorFlow "
          "frames it",
          "[events]") {
  // Written out by hand: the length 24 and its masked CRC32C, the event
  // (wall_time = 1700000000.5 as field 1, "brain.Event:2" as field 3),
  // and the payload's masked CRC32C (computed apart from this code base,
  // with a bitwise CRC32C in Python).
  auto expected = bytes_of(
    {0x18, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xa3, 0x7f,
     0x4b, 0x22, 0x09, 0x00, 0x00, 0x20, 0x40, 0xfc, 0x54, 0xd9,
     0x41, 0x1a, 0x0d, 0x62, 0x72, 0x61, 0x69, 0x6e, 0x2e, 0x45,
     0x76, 0x65, 0x6e, 0x74, 0x3a, 0x32, 0x2b, 0x35, 0x31, 0x10});
  CHECK(tfrecord_frame(file_version_event(1700000000.5)) == expected);
  // A SessionLog START at step 7 (wall_time 2.0): fields 1, 2 and 7.
  tf::Event e;
  e.set_wall_time(2.0);
  e.set_step(7);
  e.mutable_session_log()->set_status(tf::SessionLog::START);
  CHECK(e.SerializeAsString()
        == bytes_of({0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40,
                     0x10, 0x07, 0x3a, 0x02, 0x08, 0x01}));
}

TEST_CASE("an event writer names its file as TensorBoard expects, starts "
          "with the file version and holds its run directory",
          "[events]") {
  temp_dir dir;
  auto run = dir.file("logs/job");
  {
    event_writer w{run};
    auto name = std::filesystem::path{w.path()}.filename().string();
    INFO(name);
    REQUIRE(name.rfind("events.out.tfevents.", 0) == 0);
    // 10-digit seconds, then host, pid and our suffix.
    auto stamp = name.substr(20, 10);
    CHECK(stamp.find_first_not_of("0123456789") == std::string::npos);
    CHECK(name[30] == '.');
    CHECK(name.find(".actorflow") != std::string::npos);
    // One writer per run directory.
    CHECK_THROWS_WITH(event_writer{run},
                      Catch::Contains("another process is writing events"));
    w.session_start(40);
    w.scalars(41, {{"train/loss", 0.5}, {"stage/read/busy", 0.25}});
    const float values[] = {1.0f, 2.0f, 2.0f, 4.0f};
    w.histogram(summarize("weights/kernel", 41, values, 4));
    auto events = read_events(w.path());
    REQUIRE(events.size() == 4);
    CHECK(events[0].file_version() == "brain.Event:2");
    CHECK(events[1].session_log().status() == tf::SessionLog::START);
    CHECK(events[1].step() == 40);
    REQUIRE(events[2].summary().value_size() == 2);
    CHECK(events[2].step() == 41);
    CHECK(events[2].summary().value(0).tag() == "train/loss");
    CHECK(events[2].summary().value(0).simple_value() == 0.5f);
    auto& h = events[3].summary().value(0).histo();
    CHECK(h.num() == 4);
    CHECK(h.min() == 1.0);
    CHECK(h.max() == 4.0);
    CHECK(h.sum() == 9.0);
    CHECK(h.sum_squares() == 25.0);
    REQUIRE(h.bucket_size() == h.bucket_limit_size());
    double counted = 0;
    for (auto c : h.bucket())
      counted += c;
    CHECK(counted == 4);
    CHECK(h.bucket_limit(h.bucket_limit_size() - 1) == Approx(4.0));
  }
  // The lock goes with the writer.
  event_writer again{run};
  CHECK(again.path() != "");
}

TEST_CASE("progress becomes per-stage rates and the trainers' global step",
          "[events]") {
  progress_scalars ps;
  job_progress p;
  p.elapsed_s = 1;
  stage_stats a;
  a.stage = "train[0]";
  a.stage_name = "train";
  a.is_sink = true;
  a.items_in = 10;
  a.busy_s = 0.5;
  a.metrics = {{"step", 10}, {"samples", 100}, {"loss", 0.4},
               {"staleness_max", 1}, {"wait_params_s", 0.1}};
  a.wait_input_s = 0.5;
  auto b = a;
  b.stage = "train[1]";
  b.items_in = 30;
  b.busy_s = 1.0;
  b.metrics = {{"step", 30}, {"samples", 300}, {"loss", 0.2},
               {"staleness_max", 3}, {"wait_params_s", 0.2},
               {"wait_slot_s", 1.0}}; // (trainer { concurrent_steps })
  p.stages = {a, b};
  int64_t step = 0;
  auto first = ps.next(p, step);
  CHECK(step == 40);
  // One second later: 20 more items, 0.5 s more busy per replica.
  p.elapsed_s = 2;
  p.stages[0].items_in += 10;
  p.stages[1].items_in += 10;
  p.stages[0].busy_s += 0.5;
  p.stages[1].busy_s += 0.5;
  // Replica 0 also waited 0.5 s for input, 0.2 s of its busy time for
  // parameters.
  p.stages[0].wait_input_s += 0.5;
  p.stages[0].metrics.back().value += 0.2;
  // Replica 1 waited 0.3 s of its busy time for a step slot.
  p.stages[1].metrics.back().value += 0.3;
  auto v = ps.next(p, step);
  std::map<std::string, double> m;
  for (auto& x : v)
    m[x.name] = x.value;
  CHECK(m.at("stage/train/items_per_s") == Approx(20));
  CHECK(m.at("stage/train/busy") == Approx(0.5));
  CHECK(m.at("stage/train/replicas") == 2);
  // Each trainer replica's shares of its own time in that second.
  CHECK(m.at("stage/train[0]/busy") == Approx(0.5));
  CHECK(m.at("stage/train[0]/param_wait") == Approx(0.2));
  CHECK(m.at("stage/train[0]/input_wait") == Approx(0.5));
  CHECK(m.at("stage/train[1]/busy") == Approx(1.0));
  CHECK(m.at("stage/train[1]/param_wait") == Approx(0.0));
  CHECK(m.at("stage/train[1]/input_wait") == Approx(0.0));
  // 0.3 s of the 0.5 s replica 1 accounted in that second.
  CHECK(m.at("stage/train[1]/slot_wait") == Approx(0.6));
  CHECK(m.count("stage/train[0]/slot_wait") == 0); // no bound: no tag
  CHECK(m.at("train/step") == 40);
  CHECK(m.at("train/samples") == 400);
  CHECK(m.at("train/loss") == Approx(0.3));
  CHECK(m.at("train/staleness_max") == 3);
}

TEST_CASE("summarize: buckets, sums and non-finite values of a histogram",
          "[events]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const float v[] = {-1.0f, 0.0f, 0.0f, 3.0f, nan, inf};
  auto h = summarize("w", 7, v, 6, 1.0, 4);
  CHECK(h.tag == "w");
  CHECK(h.step == 7);
  CHECK(h.num == 4);
  CHECK(h.nonfinite == 2);
  CHECK(h.min == -1.0);
  CHECK(h.max == 3.0);
  CHECK(h.sum == 2.0);
  CHECK(h.sum_squares == 10.0);
  // (-1, 0] holds -1 and both zeros; (2, 3] holds 3.
  CHECK(h.limits == std::vector<double>{0.0, 1.0, 2.0, 3.0});
  CHECK(h.counts == std::vector<double>{3.0, 0.0, 0.0, 1.0});

  SECTION("scaled (a gradient sum over a batch of 2)") {
    auto s = summarize("g", 0, v, 4, 0.5, 4);
    CHECK(s.min == -0.5);
    CHECK(s.max == 1.5);
    CHECK(s.sum == 1.0);
    CHECK(s.counts == std::vector<double>{3.0, 0.0, 0.0, 1.0});
  }
  SECTION("all values equal: one bucket") {
    const float same[] = {2.0f, 2.0f, 2.0f};
    auto s = summarize("b", 0, same, 3);
    CHECK(s.limits == std::vector<double>{2.0});
    CHECK(s.counts == std::vector<double>{3.0});
  }
  SECTION("no finite value: no buckets") {
    auto s = summarize("e", 0, v + 4, 2);
    CHECK(s.num == 0);
    CHECK(s.nonfinite == 2);
    CHECK(s.counts.empty());
  }
}
