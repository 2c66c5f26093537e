// tfrecord_source on real files: TFRecord shards of tf.Example records
// holding JPEG images, sharded over replicas, bad records named by file and
// offset, a restored reader going on where it was.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include <google/protobuf/text_format.h>

#include "actorflow/actors/features/image_decode.hpp"
#include "actorflow/gpu/jpeg_decoder.hpp"
#include "actorflow/proto/example.pb.h"
#include "actorflow/runtime/formats/tfrecord_writer.hpp"
#include "actorflow/runtime/image/jpeg.hpp"
#include "actorflow/runtime/job/autotune.hpp"
#include "actorflow/runtime/stage/registry.hpp"
#include "tests/support/harness.hpp"
#include "tests/support/records.hpp"
#include "tests/support/temp_dir.hpp"

using namespace af;
using namespace af::test;

TEST_CASE_METHOD(fixture, "TFRecord shards of JPEG Examples decode to the "
                          "pixels and labels that were written",
                 "[input]") {
  temp_dir dir;
  write_dataset(dir, 3, 20);
  auto r = run_text(sys, reg, pipeline(dir, R"(
    stage { name: "decode" type: "image_decode" replicas: 2
            input { stage: "parse" }
            image_decode { channels: 1 height: 8 width: 8 dtype: "u8" } }
    stage { name: "sink" type: "collect" input { stage: "decode" } }
  )"));
  REQUIRE(r.ok);
  auto labels = labels_of(obs->collected);
  REQUIRE(labels.size() == 60);
  std::sort(labels.begin(), labels.end());
  for (int i = 0; i < 60; ++i)
    CHECK(labels[static_cast<size_t>(i)] == i);
  for (auto& b : obs->collected) {
    auto& img = b.at("image");
    REQUIRE(img.type() == dtype::u8);
    REQUIRE(img.shape() == tensor::shape_type{b.records(), 8, 8, 1});
    CHECK(b.at("weight").type() == dtype::f32);
    CHECK(b.find("record") == nullptr);  // parsed away
    REQUIRE(b.find("key") != nullptr);
    for (int64_t i = 0; i < b.records(); ++i) {
      auto label = b.at("label").data_as<int64_t>()[i];
      auto want = static_cast<int>(label * 7 % 256);
      auto* px = img.data_as<uint8_t>() + i * 64;
      for (int k = 0; k < 64; ++k)
        REQUIRE(std::abs(int{px[k]} - want) <= 2);  // JPEG is lossy
    }
  }
}

TEST_CASE_METHOD(fixture, "files are sharded across reader replicas and "
                          "every record is read exactly once",
                 "[input]") {
  temp_dir dir;
  write_dataset(dir, 5, 13);
  auto r = run_text(sys, reg,
                    pipeline(dir, R"(
    stage { name: "sink" type: "collect" input { stage: "parse" } }
  )",
                             "interleave: 2 epochs: 2", 2));
  REQUIRE(r.ok);
  auto labels = labels_of(obs->collected);
  REQUIRE(labels.size() == 130);
  std::multiset<int64_t> seen(labels.begin(), labels.end());
  for (int i = 0; i < 65; ++i)
    CHECK(seen.count(i) == 2);
  CHECK(stats_of(r, "read[0]").items_out + stats_of(r, "read[1]").items_out
        > 0);
}

TEST_CASE_METHOD(fixture, "bad records stop the job naming file, offset or "
                          "feature, or are skipped and counted",
                 "[input][bad-input]") {
  temp_dir dir;
  auto paths = write_dataset(dir, 1, 10);
  auto content = temp_dir::read(paths[0]);
  SECTION("a flipped payload byte fails the job with file and offset") {
    content[12 + 20] ^= 0x10;  // inside record 0's data
    temp_dir::read(dir.write("data-0.tfrecord", content));
    auto r = run_text(sys, reg, pipeline(dir, R"(
      stage { name: "sink" type: "collect" input { stage: "parse" } })"));
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.error, Catch::Contains("data-0.tfrecord: offset 0: corrupt "
                                        "record data"));
  }
  SECTION("with on_corrupt: skip, the rest is read") {
    content[12 + 20] ^= 0x10;
    dir.write("data-0.tfrecord", content);
    auto r = run_text(sys, reg,
                      pipeline(dir, R"(
      stage { name: "sink" type: "collect" input { stage: "parse" } })",
                               "on_corrupt: \"skip\""));
    REQUIRE(r.ok);
    CHECK(labels_of(obs->collected).size() == 9);
  }
  SECTION("a missing feature names the feature and the record") {
    auto r = run_text(sys, reg,
                      pipeline(dir, R"(
      stage { name: "p2" type: "example_parse" input { stage: "parse" }
              example_parse { input: "image"
                              feature { name: "nope" type: "float" } } }
      stage { name: "sink" type: "collect" input { stage: "p2" } })"));
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.error, Catch::Contains("not a tf.Example"));
  }
  SECTION("a mistyped feature") {
    auto text = pipeline(dir, R"(
      stage { name: "sink" type: "collect" input { stage: "parse" } })");
    text.replace(text.find("name: \"label\" type: \"int64\""),
                 std::string("name: \"label\" type: \"int64\"").size(),
                 "name: \"label\" type: \"float\"");
    auto r = run_text(sys, reg, text);
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.error,
               Catch::Contains("data-0.tfrecord@0: feature 'label' holds "
                               "int64 values, declared float"));
  }
  SECTION("a wrong number of values") {
    auto text = pipeline(dir, R"(
      stage { name: "sink" type: "collect" input { stage: "parse" } })");
    text.replace(text.find("name: \"weight\" type: \"float\""),
                 std::string("name: \"weight\" type: \"float\"").size(),
                 "name: \"weight\" type: \"float\" shape: 2");
    auto r = run_text(sys, reg, text);
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.error, Catch::Contains("feature 'weight' has 1 values, its "
                                        "declared shape needs 2"));
  }
}

TEST_CASE("a tfrecord_source restored from a snapshot continues exactly "
          "where it was",
          "[input]") {
  temp_dir dir;
  write_dataset(dir, 3, 11);
  registry reg = make_registry(std::make_shared<observations>());
  auto s = tfrecord_stage(dir, 4, 2);
  stage_info info{"read", "tfrecord_source", 0, 1, 0, nullptr};
  auto* type = reg.find("tfrecord_source");
  auto whole = type->make(info, s);
  collecting_emitter all;
  while (whole->produce(all)) {
  }
  auto first = type->make(info, s);
  collecting_emitter part;
  for (int i = 0; i < 7; ++i)
    REQUIRE(first->produce(part));
  auto state = first->snapshot();
  auto second = type->make(info, s);
  second->restore(state);
  while (second->produce(part)) {
  }
  REQUIRE(part.items.size() == all.items.size());
  for (size_t i = 0; i < all.items.size(); ++i)
    CHECK(part.items[i].at("record") == all.items[i].at("record"));
  CHECK_THROWS_AS(second->restore("garbage"), std::invalid_argument);
}
