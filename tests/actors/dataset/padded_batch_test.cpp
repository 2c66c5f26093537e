// Variable-length features (example_parse var_len) and padded_batch:
// values and lengths as written, padding past each record's length, the
// batch as wide as its longest record, buckets by length, every record
// exactly once, and a snapshot that resumes to the same batches.
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "actorflow/proto/example.pb.h"
#include "actorflow/runtime/formats/tfrecord_writer.hpp"
#include "tests/support/harness.hpp"
#include "tests/support/temp_dir.hpp"

using namespace af;
using namespace af::test;

namespace {

constexpr int64_t records = 40;

// Record i: label i, tokens {100i, 100i + 1, ...} (i * 7 % 9 of them; 0
// tokens: every ninth record has none, and records 5 and 23 lack the
// feature), weights {i / 2, ...} as floats, one per token.
std::vector<int64_t> tokens_of(int64_t i) {
  std::vector<int64_t> t;
  for (int64_t k = 0; k < i * 7 % 9; ++k)
    t.push_back(100 * i + k);
  return t;
}

void write_records(const temp_dir& dir) {
  tfrecord_writer w;
  REQUIRE(w.open(dir.file("data.tfrecord")));
  for (int64_t i = 0; i < records; ++i) {
    tf::Example ex;
    auto& f = *ex.mutable_features()->mutable_feature();
    f["label"].mutable_int64_list()->add_value(i);
    if (i != 5 && i != 23)
      for (auto t : tokens_of(i)) {
        f["tokens"].mutable_int64_list()->add_value(t);
        f["weights"].mutable_float_list()->add_value(static_cast<float>(i) / 2);
      }
    REQUIRE(w.write(ex.SerializeAsString()));
  }
  REQUIRE(w.close());
}

std::string read_and_parse(const temp_dir& dir) {
  return R"(
    stage { name: "read" type: "tfrecord_source"
            tfrecord_source { files: ")"
         + dir.file("data.tfrecord") + R"(" records_per_item: 6 } }
    stage { name: "parse" type: "example_parse" input { stage: "read" }
            example_parse { feature { name: "label" type: "int64" }
                            feature { name: "tokens" type: "int64"
                                      var_len: true }
                            feature { name: "weights" type: "float"
                                      var_len: true } } })";
}

size_t expected_length(int64_t label) {
  return label == 5 || label == 23 ? 0 : tokens_of(label).size();
}

// Every record of `b`: tokens and weights as written up to the length,
// `pad` past it; returns the labels.
std::vector<int64_t> check_batch(const batch& b, int64_t pad) {
  std::vector<int64_t> labels;
  auto& tokens = b.at("tokens");
  auto& weights = b.at("weights");
  auto& lengths = b.at("tokens_length");
  REQUIRE(tokens.shape().size() == 2);
  auto width = tokens.shape()[1];
  CHECK(weights.shape() == tokens.shape());
  int64_t longest = 0;
  for (int64_t i = 0; i < b.records(); ++i) {
    auto label = b.at("label").data_as<int64_t>()[i];
    INFO("record " << label);
    labels.push_back(label);
    auto want = tokens_of(label);
    if (label == 5 || label == 23)
      want.clear();
    CHECK(lengths.data_as<int64_t>()[i] == static_cast<int64_t>(want.size()));
    CHECK(b.at("weights_length").data_as<int64_t>()[i]
          == static_cast<int64_t>(want.size()));
    longest = std::max(longest, static_cast<int64_t>(want.size()));
    for (int64_t k = 0; k < width; ++k) {
      bool in = k < static_cast<int64_t>(want.size());
      CHECK(tokens.data_as<int64_t>()[i * width + k]
            == (in ? want[static_cast<size_t>(k)] : pad));
      CHECK(weights.data_as<float>()[i * width + k]
            == (in ? static_cast<float>(label) / 2 : static_cast<float>(pad)));
    }
  }
  CHECK(width == longest); // no wider than its longest record
  return labels;
}

} // namespace

TEST_CASE_METHOD(fixture, "var_len features give values padded to the "
                          "item's longest record, and their lengths",
                 "[padded_batch][input]") {
  temp_dir dir;
  write_records(dir);
  auto r = run_text(sys, reg, read_and_parse(dir) + R"(
    stage { name: "sink" type: "collect" input { stage: "parse" } })");
  REQUIRE(r.ok);
  std::vector<int64_t> labels;
  for (auto& b : obs->collected)
    for (auto l : check_batch(b, 0))
      labels.push_back(l);
  CHECK(labels.size() == records);
  CHECK(std::is_sorted(labels.begin(), labels.end()));
}

TEST_CASE_METHOD(fixture, "padded_batch pads each batch to its longest "
                          "record with padding_value",
                 "[padded_batch][input]") {
  temp_dir dir;
  write_records(dir);
  auto r = run_text(sys, reg, read_and_parse(dir) + R"(
    stage { name: "batch" type: "padded_batch" input { stage: "parse" }
            padded_batch { batch_size: 8 padding_value: -1 } }
    stage { name: "sink" type: "collect" input { stage: "batch" } })");
  REQUIRE(r.ok);
  std::vector<int64_t> labels;
  for (auto& b : obs->collected) {
    CHECK(b.records() == 8);
    for (auto l : check_batch(b, -1))
      labels.push_back(l);
  }
  std::vector<int64_t> want(records);
  for (int64_t i = 0; i < records; ++i)
    want[static_cast<size_t>(i)] = i;
  CHECK(labels == want); // in order, each once
}

TEST_CASE_METHOD(fixture, "padded_batch buckets records by length, each "
                          "bucket with its own batch size",
                 "[padded_batch][input]") {
  temp_dir dir;
  write_records(dir);
  auto r = run_text(sys, reg, read_and_parse(dir) + R"(
    stage { name: "batch" type: "padded_batch" input { stage: "parse" }
            padded_batch { bucket_boundaries: [3, 6]
                           bucket_batch_sizes: [5, 4, 3]
                           length_field: "tokens_length" } }
    stage { name: "sink" type: "collect" input { stage: "batch" } })");
  REQUIRE(r.ok);
  auto bucket = [](int64_t label) {
    auto l = expected_length(label);
    return l < 3 ? 0 : l < 6 ? 1 : 2;
  };
  std::multiset<int64_t> labels;
  std::map<int, int> partial; // bucket -> batches smaller than its size
  const int sizes[] = {5, 4, 3};
  for (auto& b : obs->collected) {
    auto got = check_batch(b, 0);
    REQUIRE_FALSE(got.empty());
    auto which = bucket(got.front());
    for (auto l : got) {
      CHECK(bucket(l) == which);
      labels.insert(l);
    }
    if (b.records() != sizes[which])
      ++partial[which];
    CHECK(b.records() <= sizes[which]);
  }
  for (auto& [which, n] : partial) {
    INFO("bucket " << which);
    CHECK(n == 1); // only the epoch's remainder
  }
  CHECK(labels.size() == records);
  for (int64_t i = 0; i < records; ++i)
    CHECK(labels.count(i) == 1);
}

TEST_CASE("padded_batch resumes from a snapshot to the same batches",
          "[padded_batch][input]") {
  auto reg = make_registry(std::make_shared<observations>());
  topology::Stage s;
  s.set_type("padded_batch");
  auto* c = s.mutable_padded_batch();
  c->add_bucket_boundaries(2);
  c->add_bucket_batch_sizes(3);
  c->add_bucket_batch_sizes(2);
  c->set_length_field("x_length");
  c->set_padding_value(9);
  // Item k: 3 records, x [3, 3], lengths (k + i) % 4 (i: row), x values
  // 10k + i.
  auto item = [](int64_t k) {
    batch b;
    auto x = tensor::allocate(dtype::i32, {3, 3});
    auto len = tensor::allocate(dtype::i64, {3});
    for (int64_t i = 0; i < 3; ++i) {
      len.mutable_data_as<int64_t>()[i] = std::min<int64_t>((k + i) % 4, 3);
      for (int64_t j = 0; j < 3; ++j)
        x.mutable_data_as<int32_t>()[i * 3 + j] = static_cast<int32_t>(10 * k + i);
    }
    b.set("x", std::move(x));
    b.set("x_length", std::move(len));
    return b;
  };
  std::vector<batch> items;
  for (int64_t k = 0; k < 7; ++k)
    items.push_back(item(k));
  // After 3 items each bucket holds one record (lengths 0 1 2 | 1 2 3 |
  // 2 3 0): the snapshot carries both.
  auto run = resume_between(reg, s, items, 3);
  auto& resumed = run.resumed;
  REQUIRE(run.joined.size() == run.whole.size());
  for (size_t b = 0; b < run.joined.size(); ++b) {
    INFO("batch " << b);
    auto& want = run.whole[b];
    auto& got = run.joined[b];
    CHECK(got.seq == want.seq);
    REQUIRE(got.at("x").shape() == want.at("x").shape());
    CHECK(std::equal(got.at("x").data_as<int32_t>(),
                     got.at("x").data_as<int32_t>() + got.at("x").elements(),
                     want.at("x").data_as<int32_t>()));
    // Past each record's length: the padding value.
    auto w = got.at("x").shape()[1];
    for (int64_t i = 0; i < got.records(); ++i)
      for (auto j = got.at("x_length").data_as<int64_t>()[i]; j < w; ++j)
        CHECK(got.at("x").data_as<int32_t>()[i * w + j] == 9);
  }
  CHECK_THROWS_WITH(resumed->restore("not a state"),
                    Catch::Contains("state"));
}

TEST_CASE("var_len and padded_batch refuse what they cannot do, by name",
          "[padded_batch][bad-input]") {
  auto reg = make_registry(std::make_shared<observations>());
  auto problem = [&](const std::string& text) {
    auto loaded = load_topology_text(text, "t.pbtxt", reg);
    std::string all;
    for (auto& e : loaded.errors)
      all += e.to_string() + "\n";
    return all;
  };
  auto source = std::string{R"(
    stage { name: "read" type: "tfrecord_source"
            tfrecord_source { files: "x" } } )"};
  CHECK_THAT(problem(source + R"(
    stage { name: "p" type: "example_parse" input { stage: "read" }
            example_parse { feature { name: "s" type: "bytes"
                                      var_len: true } } })"),
             Catch::Contains("var_len takes"));
  CHECK_THAT(problem(source + R"(
    stage { name: "p" type: "example_parse" input { stage: "read" }
            example_parse { feature { name: "t" type: "int64" var_len: true }
                            feature { name: "t_length" type: "int64" } } })"),
             Catch::Contains("clashes"));
  CHECK_THAT(problem(source + R"(
    stage { name: "b" type: "padded_batch" input { stage: "read" }
            padded_batch { batch_size: 4 bucket_boundaries: [4] } })"),
             Catch::Contains("need a length_field"));
  CHECK_THAT(problem(source + R"(
    stage { name: "b" type: "padded_batch" input { stage: "read" }
            padded_batch { bucket_boundaries: [4, 2] length_field: "l"
                           bucket_batch_sizes: [1, 2, 3] } })"),
             Catch::Contains("strictly increasing"));
  CHECK_THAT(problem(source + R"(
    stage { name: "b" type: "padded_batch" input { stage: "read" }
            padded_batch { bucket_boundaries: [4] length_field: "l"
                           bucket_batch_sizes: [1] } })"),
             Catch::Contains("need 2 bucket_batch_sizes"));
}

TEST_CASE("padded_batch refuses a padding value the field cannot hold",
          "[padded_batch][bad-input]") {
  auto reg = make_registry(std::make_shared<observations>());
  topology::Stage s;
  s.set_type("padded_batch");
  s.mutable_padded_batch()->set_batch_size(2);
  s.mutable_padded_batch()->set_padding_value(300);
  auto logic = reg.find("padded_batch")->make(stage_info{}, s);
  collecting_emitter out;
  batch b;
  b.set("pixels", tensor::allocate(dtype::u8, {2, 4}));
  CHECK_THROWS_WITH(logic->process(std::move(b), out),
                    Catch::Contains("'pixels'") && Catch::Contains("u8"));
}
