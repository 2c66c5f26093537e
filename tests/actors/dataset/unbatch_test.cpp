// unbatch: each record split along its first inner dimension, the values
// of [n] fields repeated with it, in order; fields that split differently
// are refused by name.
#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

#include "actorflow/proto/example.pb.h"
#include "actorflow/runtime/formats/tfrecord_writer.hpp"
#include "tests/support/harness.hpp"
#include "tests/support/numbered.hpp"
#include "tests/support/temp_dir.hpp"

using namespace af;
using namespace af::test;

namespace {

std::string name_of(int64_t i) { return numbered("r", i); }

// 20 records: label i, tokens {10i, 10i + 1, 10i + 2}, pair {i, -i},
// name "r<i>".
void write_records(const temp_dir& dir) {
  tfrecord_writer w;
  REQUIRE(w.open(dir.file("data.tfrecord")));
  for (int64_t i = 0; i < 20; ++i) {
    tf::Example ex;
    auto& f = *ex.mutable_features()->mutable_feature();
    f["label"].mutable_int64_list()->add_value(i);
    for (int64_t k = 0; k < 3; ++k)
      f["tokens"].mutable_int64_list()->add_value(10 * i + k);
    f["pair"].mutable_float_list()->add_value(static_cast<float>(i));
    f["pair"].mutable_float_list()->add_value(static_cast<float>(-i));
    f["name"].mutable_bytes_list()->add_value(name_of(i));
    REQUIRE(w.write(ex.SerializeAsString()));
  }
  REQUIRE(w.close());
}

std::string job(const temp_dir& dir, const std::string& features) {
  return R"(
    stage { name: "read" type: "tfrecord_source"
            tfrecord_source { files: ")"
         + dir.file("data.tfrecord") + R"(" records_per_item: 6 } }
    stage { name: "parse" type: "example_parse" input { stage: "read" }
            example_parse { feature { name: "label" type: "int64" }
                            feature { name: "name" type: "bytes" } )"
         + features + R"( } }
    stage { name: "flat" type: "unbatch" input { stage: "parse" }
            unbatch { } }
    stage { name: "sink" type: "collect" input { stage: "flat" } })";
}

} // namespace

TEST_CASE_METHOD(fixture, "unbatch splits every record along its inner "
                          "dimension, in order",
                 "[unbatch][input]") {
  temp_dir dir;
  write_records(dir);
  auto r = run_text(
    sys, reg,
    job(dir, R"(feature { name: "tokens" type: "int64" shape: 3 })"));
  REQUIRE(r.ok);
  std::vector<std::pair<int64_t, int64_t>> got; // (label, token)
  for (auto& b : obs->collected) {
    CHECK(b.at("tokens").shape() == tensor::shape_type{b.records()});
    for (int64_t i = 0; i < b.records(); ++i) {
      auto label = b.at("label").data_as<int64_t>()[i];
      CHECK(b.at("name").string_at(i) == name_of(label));
      got.emplace_back(label, b.at("tokens").data_as<int64_t>()[i]);
    }
  }
  std::vector<std::pair<int64_t, int64_t>> want;
  for (int64_t i = 0; i < 20; ++i)
    for (int64_t k = 0; k < 3; ++k)
      want.emplace_back(i, 10 * i + k);
  CHECK(got == want);
  CHECK(obs->collected.size() == 4); // one item out per item in
}

TEST_CASE_METHOD(fixture, "unbatch refuses fields that split differently, "
                          "or nothing to split",
                 "[unbatch][bad-input]") {
  temp_dir dir;
  write_records(dir);
  auto r = run_text(sys, reg, job(dir, R"(
    feature { name: "tokens" type: "int64" shape: 3 }
    feature { name: "pair" type: "float" shape: 2 })"));
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.error, Catch::Contains("unbatch: field 'pair' has 2 values "
                                      "per record along its first inner "
                                      "dimension, field 'tokens' 3"));
  r = run_text(sys, reg, job(dir, ""));
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.error, Catch::Contains("unbatch: no field has an inner "
                                      "dimension to split"));
}
