// tfrecord_sink: what it writes reads back as the records it got (every
// kind of field, var_len cut to its length, GZIP, several files), a new
// job refuses to write over an earlier run's files, and a resumed job
// removes the files written after its checkpoint so that every record is
// in exactly one file.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "actorflow/actors/sinks/tfrecord_sink.hpp"
#include "actorflow/proto/example.pb.h"
#include "actorflow/runtime/formats/tfrecord_reader.hpp"
#include "actorflow/runtime/formats/tfrecord_writer.hpp"
#include "tests/support/harness.hpp"
#include "tests/support/numbered.hpp"
#include "tests/support/temp_dir.hpp"

using namespace af;
using namespace af::test;
namespace fs = std::filesystem;

namespace {

constexpr int64_t records = 40;

// Record i: label i, name "n<i>" (record 7: an empty string), pair
// {i + 0.25, -i}, tokens {i, i + 1, ...} (i % 6 of them).
tf::Example example_of(int64_t i) {
  tf::Example ex;
  auto& f = *ex.mutable_features()->mutable_feature();
  f["label"].mutable_int64_list()->add_value(i);
  f["name"].mutable_bytes_list()->add_value(i == 7 ? "" : numbered("n", i));
  f["pair"].mutable_float_list()->add_value(static_cast<float>(i) + 0.25f);
  f["pair"].mutable_float_list()->add_value(static_cast<float>(-i));
  for (int64_t k = 0; k < i % 6; ++k)
    f["tokens"].mutable_int64_list()->add_value(i + k);
  return ex;
}

void write_input(const temp_dir& dir) {
  tfrecord_writer w;
  REQUIRE(w.open(dir.file("in.tfrecord")));
  for (int64_t i = 0; i < records; ++i)
    REQUIRE(w.write(example_of(i).SerializeAsString()));
  REQUIRE(w.close());
}

std::string parse(const std::string& files) {
  return R"(
    stage { name: "read" type: "tfrecord_source"
            tfrecord_source { files: ")"
         + files + R"(" records_per_item: 6 } }
    stage { name: "parse" type: "example_parse" input { stage: "read" }
            example_parse { feature { name: "label" type: "int64" }
                            feature { name: "name" type: "bytes" }
                            feature { name: "pair" type: "float" shape: 2 }
                            feature { name: "tokens" type: "int64"
                                      var_len: true } } })";
}

// Every record of the files, by label, as TensorFlow would see them.
std::map<int64_t, std::string> read_back(const std::vector<std::string>& files) {
  std::map<int64_t, std::string> out;
  for (auto& path : files) {
    tfrecord_reader r;
    REQUIRE(r.open(path));
    std::string rec;
    while (r.next(rec) == read_status::ok) {
      tf::Example ex;
      REQUIRE(ex.ParseFromString(rec));
      auto label = ex.features().feature().at("label").int64_list().value(0);
      INFO("label " << label << " in " << path);
      CHECK(out.count(label) == 0); // exactly once
      out[label] = rec;
    }
  }
  return out;
}

std::vector<std::string> files_in(const temp_dir& dir, const std::string& stem) {
  std::vector<std::string> out;
  for (auto& e : fs::directory_iterator(dir.path()))
    if (e.path().filename().string().rfind(stem, 0) == 0)
      out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

} // namespace

TEST_CASE_METHOD(fixture, "tfrecord_sink writes records that read back as "
                          "they were, in GZIP files of records_per_file",
                 "[tfrecord_sink][input]") {
  temp_dir dir;
  write_input(dir);
  auto r = run_text(sys, reg, parse(dir.file("in.tfrecord")) + R"(
    stage { name: "save" type: "tfrecord_sink" input { stage: "parse" }
            tfrecord_sink { path: ")" + dir.file("out") + R"("
                            records_per_file: 15 compression: "gzip" } })");
  REQUIRE(r.ok);
  auto files = files_in(dir, "out");
  REQUIRE(files == std::vector<std::string>{
                     tfrecord_sink_file(dir.file("out"), 0, 0, true),
                     tfrecord_sink_file(dir.file("out"), 0, 1, true),
                     tfrecord_sink_file(dir.file("out"), 0, 2, true)});
  // Identity: each record's features equal the input's (tokens cut to
  // their length, no tokens_length, no key or index).
  auto got = read_back(files);
  REQUIRE(got.size() == records);
  for (int64_t i = 0; i < records; ++i) {
    INFO("record " << i);
    tf::Example back;
    REQUIRE(back.ParseFromString(got[i]));
    auto want = example_of(i);
    auto& f = *want.mutable_features()->mutable_feature();
    f["tokens"].mutable_int64_list(); // present, maybe empty
    CHECK(back.features().feature().size() == 4);
    for (auto& [name, feature] : f)
      CHECK(back.features().feature().at(name).SerializeAsString()
            == feature.SerializeAsString());
  }
  // tfrecord_source + example_parse read them back to the same tensors.
  auto again = run_text(sys, reg, parse(dir.file("out-*")) + R"(
    stage { name: "sink" type: "collect" input { stage: "parse" } })");
  REQUIRE(again.ok);
  int64_t seen = 0;
  for (auto& b : obs->collected) {
    for (int64_t i = 0; i < b.records(); ++i, ++seen) {
      auto label = b.at("label").data_as<int64_t>()[i];
      CHECK(label == seen); // files in order, records in order
      CHECK(b.at("tokens_length").data_as<int64_t>()[i] == label % 6);
      auto w = b.at("tokens").shape()[1];
      for (int64_t k = 0; k < label % 6; ++k)
        CHECK(b.at("tokens").data_as<int64_t>()[i * w + k] == label + k);
    }
  }
  CHECK(seen == records);
}

TEST_CASE_METHOD(fixture, "tfrecord_sink writes only the fields it is given",
                 "[tfrecord_sink][input]") {
  temp_dir dir;
  write_input(dir);
  auto r = run_text(sys, reg, parse(dir.file("in.tfrecord")) + R"(
    stage { name: "save" type: "tfrecord_sink" input { stage: "parse" }
            tfrecord_sink { path: ")" + dir.file("out") + R"("
                            fields: ["label", "index"] } })");
  REQUIRE(r.ok);
  auto got = read_back({tfrecord_sink_file(dir.file("out"), 0, 0, false)});
  REQUIRE(got.size() == records);
  for (int64_t i = 0; i < records; ++i) {
    tf::Example back;
    REQUIRE(back.ParseFromString(got[i]));
    auto& f = back.features().feature();
    CHECK(f.size() == 2);
    CHECK(f.at("label").int64_list().value(0) == i);
    CHECK(f.at("index").int64_list().value(0) == i); // record i of file 0
  }
  auto wrong = run_text(sys, reg, parse(dir.file("in.tfrecord")) + R"(
    stage { name: "save" type: "tfrecord_sink" input { stage: "parse" }
            tfrecord_sink { path: ")" + dir.file("other") + R"("
                            fields: ["lable"] } })");
  CHECK_FALSE(wrong.ok);
  CHECK_THAT(wrong.error, Catch::Contains("tfrecord_sink: no field 'lable' to "
                                          "write (the item has label, name"));
}

TEST_CASE_METHOD(fixture, "tfrecord_sink refuses an earlier run's files and "
                          "fields a tf.Example cannot hold exactly",
                 "[tfrecord_sink][bad-input]") {
  temp_dir dir;
  write_input(dir);
  auto job = parse(dir.file("in.tfrecord")) + R"(
    stage { name: "save" type: "tfrecord_sink" input { stage: "parse" }
            tfrecord_sink { path: ")" + dir.file("out") + R"(" } })";
  REQUIRE(run_text(sys, reg, job).ok);
  auto before = temp_dir::read(tfrecord_sink_file(dir.file("out"), 0, 0, false));
  auto second = run_text(sys, reg, job);
  CHECK_FALSE(second.ok);
  CHECK_THAT(second.error, Catch::Contains("from an earlier run"));
  CHECK(temp_dir::read(tfrecord_sink_file(dir.file("out"), 0, 0, false))
        == before);

  topology::Stage s;
  s.set_type("tfrecord_sink");
  s.mutable_tfrecord_sink()->set_path(dir.file("f64"));
  auto logic = reg.find("tfrecord_sink")->make(stage_info{}, s);
  collecting_emitter out;
  batch b;
  b.set("score", tensor::allocate(dtype::f64, {2}));
  CHECK_THROWS_WITH(logic->process(std::move(b), out),
                    Catch::Contains("'score'") && Catch::Contains("f64"));

  auto loaded = load_topology_text(
    R"(stage { name: "read" type: "tfrecord_source"
               tfrecord_source { files: ")" + dir.file("in.tfrecord") + R"(" } }
       stage { name: "save" type: "tfrecord_sink" input { stage: "read" }
               tfrecord_sink { path: "/no/such/dir/out" } })",
    "t.pbtxt", reg);
  REQUIRE_FALSE(loaded.ok());
  REQUIRE(loaded.errors.size() == 1);
  CHECK_THAT(loaded.errors[0].to_string(),
             Catch::Contains("directory /no/such/dir does not exist"));
}

TEST_CASE("a resumed tfrecord_sink drops the files written after its "
          "checkpoint: every record in exactly one file",
          "[tfrecord_sink][input]") {
  temp_dir dir;
  auto reg = make_registry(std::make_shared<observations>());
  topology::Stage s;
  s.set_type("tfrecord_sink");
  s.mutable_tfrecord_sink()->set_path(dir.file("out"));
  s.mutable_tfrecord_sink()->set_records_per_file(4);
  stage_info info;
  info.name = "save";
  info.type = "tfrecord_sink";
  auto item = [](int64_t from, int64_t n) {
    batch b;
    auto label = tensor::allocate(dtype::i64, {n});
    for (int64_t i = 0; i < n; ++i)
      label.mutable_data_as<int64_t>()[i] = from + i;
    b.set("label", std::move(label));
    return b;
  };
  collecting_emitter out;
  std::string state;
  {
    auto lost = reg.find("tfrecord_sink")->make(info, s);
    lost->process(item(0, 6), out); // file 0 complete, file 1 open
    lost->quiesce();                // the checkpoint: file 1 complete too
    state = lost->snapshot();
    lost->process(item(6, 10), out); // files 2, 3 complete, 4 open
    // lost here: never finished
  }
  CHECK(files_in(dir, "out").size() == 4); // 0..3; 4's temporary removed
  auto resumed = reg.find("tfrecord_sink")->make(info, s);
  resumed->restore(state);
  CHECK(files_in(dir, "out").size() == 2); // what the checkpoint holds
  resumed->process(item(6, 10), out);
  resumed->finish(out);
  auto files = files_in(dir, "out");
  CHECK(files.size() == 5); // 4 + 2 | 4 4 2
  auto got = read_back(files);
  CHECK(got.size() == 16);
  for (int64_t i = 0; i < 16; ++i)
    CHECK(got.count(i) == 1);
}
