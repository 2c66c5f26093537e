// bucket_by_length: records batched with records of similar length, a
// batch size per bucket or a budget of padded values per batch, padded to
// the batch's longest record or the bucket's boundary; every record
// exactly once; a record past the last boundary and bad configs refused by
// name.
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

constexpr int64_t records = 60;

// Record i: label i and i * 7 % 11 tokens {100i, 100i + 1, ...}.
int64_t length_of(int64_t i) {
  return i * 7 % 11;
}

std::string data_and_parse(const temp_dir& dir) {
  tfrecord_writer w;
  REQUIRE(w.open(dir.file("data.tfrecord")));
  for (int64_t i = 0; i < records; ++i) {
    tf::Example ex;
    auto& f = *ex.mutable_features()->mutable_feature();
    f["label"].mutable_int64_list()->add_value(i);
    for (int64_t k = 0; k < length_of(i); ++k)
      f["tokens"].mutable_int64_list()->add_value(100 * i + k);
    REQUIRE(w.write(ex.SerializeAsString()));
  }
  REQUIRE(w.close());
  return R"(
    stage { name: "read" type: "tfrecord_source"
            tfrecord_source { files: ")"
         + dir.file("data.tfrecord") + R"(" records_per_item: 7 } }
    stage { name: "parse" type: "example_parse" input { stage: "read" }
            example_parse { feature { name: "label" type: "int64" }
                            feature { name: "tokens" type: "int64"
                                      var_len: true } } })";
}

// The bucket of a length with boundaries 4, 8, 11.
int bucket_of(int64_t length) {
  return length < 4 ? 0 : length < 8 ? 1 : 2;
}

struct checked {
  std::multiset<int64_t> labels;
  std::map<int, int> partial; // bucket -> batches below its size
};

// Every batch: records of one bucket, at most `sizes` of them, tokens as
// written and `pad` past each length, `width` wide (-1: the longest
// record's length).
checked check_batches(const std::vector<batch>& batches, const int* sizes,
                      const int* widths, int64_t pad) {
  checked out;
  for (auto& b : batches) {
    REQUIRE(b.records() > 0);
    auto& tokens = b.at("tokens");
    auto* labels = b.at("label").data_as<int64_t>();
    auto* lengths = b.at("tokens_length").data_as<int64_t>();
    auto which = bucket_of(length_of(labels[0]));
    INFO("a batch of bucket " << which << ", " << b.records() << " records");
    CHECK(b.records() <= sizes[which]);
    if (b.records() < sizes[which])
      ++out.partial[which];
    int64_t longest = 0;
    for (int64_t i = 0; i < b.records(); ++i) {
      CHECK(bucket_of(length_of(labels[i])) == which);
      CHECK(lengths[i] == length_of(labels[i]));
      longest = std::max(longest, lengths[i]);
      out.labels.insert(labels[i]);
    }
    auto width = tokens.shape()[1];
    CHECK(width == (widths[which] < 0 ? longest : widths[which]));
    for (int64_t i = 0; i < b.records(); ++i)
      for (int64_t k = 0; k < width; ++k)
        CHECK(tokens.data_as<int64_t>()[i * width + k]
              == (k < lengths[i] ? 100 * labels[i] + k : pad));
  }
  return out;
}

void check_each_once(const checked& c) {
  CHECK(c.labels.size() == records);
  for (int64_t i = 0; i < records; ++i)
    CHECK(c.labels.count(i) == 1);
  for (auto& [which, n] : c.partial) {
    INFO("bucket " << which);
    CHECK(n == 1); // only the epoch's remainder
  }
}

// The job: the data through a bucket_by_length stage with `block`'s
// fields (besides its length_field) into the collector.
std::string bucketed(const temp_dir& dir, const std::string& block) {
  return data_and_parse(dir) + R"(
    stage { name: "bucket" type: "bucket_by_length" input { stage: "parse" }
            bucket_by_length { length_field: "tokens_length" )"
         + block + R"( } }
    stage { name: "sink" type: "collect" input { stage: "bucket" } })";
}

} // namespace

TEST_CASE_METHOD(fixture, "bucket_by_length batches each bucket with its "
                          "own batch size, padded to the batch's longest",
                 "[bucket_by_length][input]") {
  temp_dir dir;
  auto r = run_text(sys, reg,
                    bucketed(dir, "bucket_boundaries: [4, 8, 11] "
                                  "bucket_batch_sizes: [6, 4, 3] "
                                  "padding_value: -1"));
  REQUIRE(r.ok);
  const int sizes[] = {6, 4, 3}, widths[] = {-1, -1, -1};
  check_each_once(check_batches(obs->collected, sizes, widths, -1));
}

TEST_CASE_METHOD(fixture, "bucket_by_length with tokens_per_batch keeps "
                          "each batch's padded values within the budget, "
                          "padded to the bucket's boundary",
                 "[bucket_by_length][input]") {
  temp_dir dir;
  auto r = run_text(sys, reg,
                    bucketed(dir, "bucket_boundaries: [4, 8, 11] "
                                  "tokens_per_batch: 21 "
                                  "pad_to_bucket_boundary: true"));
  REQUIRE(r.ok);
  // 21 values: 7 records of width 3, 3 of width 7, 2 of width 10.
  const int sizes[] = {7, 3, 2}, widths[] = {3, 7, 10};
  auto c = check_batches(obs->collected, sizes, widths, 0);
  check_each_once(c);
  for (auto& b : obs->collected)
    CHECK(b.records() * b.at("tokens").shape()[1] <= 21);
}

TEST_CASE_METHOD(fixture, "bucket_by_length fails on a record past its last "
                          "boundary, naming the record and the way out",
                 "[bucket_by_length][bad-input]") {
  temp_dir dir;
  auto r = run_text(sys, reg,
                    bucketed(dir, "bucket_boundaries: [4, 8] "
                                  "bucket_batch_sizes: [2, 2]"));
  REQUIRE_FALSE(r.ok);
  CHECK_THAT(r.error, Catch::Contains("bucket_by_length: record ")
                        && Catch::Contains("not below the last bucket "
                                           "boundary 8")
                        && Catch::Contains("where: \"tokens_length < 8\""));
}

TEST_CASE("bucket_by_length resumes from a snapshot to the same batches",
          "[bucket_by_length][input]") {
  auto reg = make_registry(std::make_shared<observations>());
  topology::Stage s;
  s.set_type("bucket_by_length");
  auto* c = s.mutable_bucket_by_length();
  c->set_length_field("x_length");
  c->add_bucket_boundaries(2);
  c->add_bucket_boundaries(4);
  c->set_tokens_per_batch(3); // 3 records of width 1, 1 of width 3
  c->set_pad_to_bucket_boundary(true);
  auto item = [](int64_t k) {
    batch b;
    auto x = tensor::allocate(dtype::i64, {2, 3});
    auto len = tensor::allocate(dtype::i64, {2});
    for (int64_t i = 0; i < 2; ++i) {
      len.mutable_data_as<int64_t>()[i] = (k + 2 * i) % 4;
      for (int64_t j = 0; j < 3; ++j)
        x.mutable_data_as<int64_t>()[i * 3 + j] = 10 * k + i;
    }
    b.set("x", std::move(x));
    b.set("x_length", std::move(len));
    return b;
  };
  std::vector<batch> items;
  for (int64_t k = 0; k < 6; ++k)
    items.push_back(item(k));
  auto run = resume_between(reg, s, items, 2);
  REQUIRE(run.joined.size() == run.whole.size());
  for (size_t b = 0; b < run.joined.size(); ++b) {
    INFO("batch " << b);
    auto& x = run.joined[b].at("x");
    CHECK(run.joined[b].seq == run.whole[b].seq);
    REQUIRE(x.shape() == run.whole[b].at("x").shape());
    CHECK(std::equal(x.data_as<int64_t>(), x.data_as<int64_t>() + x.elements(),
                     run.whole[b].at("x").data_as<int64_t>()));
  }
  // A padded_batch's state is not bucket_by_length's.
  topology::Stage p;
  p.set_type("padded_batch");
  p.mutable_padded_batch()->set_batch_size(2);
  auto other = reg.find("padded_batch")->make(stage_info{}, p);
  collecting_emitter ignored;
  other->process(item(0), ignored);
  CHECK_THROWS_WITH(run.resumed->restore(other->snapshot()),
                    Catch::Contains("bucket_by_length/1"));
}

TEST_CASE("bucket_by_length refuses a config it cannot run, by name",
          "[bucket_by_length][bad-input]") {
  auto reg = make_registry(std::make_shared<observations>());
  auto problem = [&](const std::string& block) {
    auto loaded = load_topology_text(R"(
      stage { name: "read" type: "tfrecord_source"
              tfrecord_source { files: "x" } }
      stage { name: "b" type: "bucket_by_length" input { stage: "read" } )"
                                       + block + " }",
                                     "t.pbtxt", reg);
    std::string all;
    for (auto& e : loaded.errors)
      all += e.to_string() + "\n";
    return all;
  };
  CHECK_THAT(problem(""),
             Catch::Contains("t.pbtxt:4: stage 'b' (bucket_by_length): needs "
                             "a bucket_by_length { length_field: \"...\" "
                             "bucket_boundaries: N } block\n"));
  CHECK_THAT(problem("bucket_by_length { length_field: \"l\" "
                     "tokens_per_batch: 8 }"),
             Catch::Contains("bucket_by_length.bucket_boundaries is required"));
  CHECK_THAT(problem("bucket_by_length { length_field: \"l\" "
                     "bucket_boundaries: [4, 4] tokens_per_batch: 8 }"),
             Catch::Contains("strictly increasing, got 4 after 4"));
  CHECK_THAT(problem("bucket_by_length { length_field: \"l\" "
                     "bucket_boundaries: [1] tokens_per_batch: 8 }"),
             Catch::Contains("must be >= 2"));
  CHECK_THAT(problem("bucket_by_length { length_field: \"l\" "
                     "bucket_boundaries: [4, 8] }"),
             Catch::Contains("either bucket_batch_sizes or tokens_per_batch"));
  CHECK_THAT(problem("bucket_by_length { length_field: \"l\" "
                     "bucket_boundaries: [4, 8] tokens_per_batch: 8 "
                     "bucket_batch_sizes: [1, 2] }"),
             Catch::Contains("either bucket_batch_sizes or tokens_per_batch"));
  CHECK_THAT(problem("bucket_by_length { length_field: \"l\" "
                     "bucket_boundaries: [4, 8] bucket_batch_sizes: [2] }"),
             Catch::Contains("2 bucket_boundaries need as many "
                             "bucket_batch_sizes, got 1"));
  CHECK_THAT(problem("bucket_by_length { length_field: \"l\" "
                     "bucket_boundaries: [4] bucket_batch_sizes: [0] }"),
             Catch::Contains("bucket_batch_sizes must be >= 1, got 0"));
}
