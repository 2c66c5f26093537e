// Deterministic mode (runtime.deterministic; the reorder buffer in the
// stage replica): the same batches for the same seed, and stages it cannot
// order refused.
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

TEST_CASE_METHOD(fixture, "deterministic mode gives the same batches for "
                          "the same seed whatever the replica counts",
                 "[input]") {
  temp_dir dir;
  write_dataset(dir, 3, 40, 20);
  auto run_with = [&](int parse_replicas, int decode_replicas) {
    obs->collected.clear();
    auto r = run_text(sys, reg, R"(
      runtime { seed: 11 deterministic: true }
      stage { name: "read" type: "tfrecord_source"
              tfrecord_source { files: ")"
                                  + dir.path() + R"(/data-*.tfrecord"
                                records_per_item: 3 interleave: 2 } }
      stage { name: "shuffle" type: "shuffle" input { stage: "read" }
              shuffle { buffer_size: 25 records_per_item: 5 } }
      stage { name: "parse" type: "example_parse" replicas: )"
                                  + std::to_string(parse_replicas) + R"(
              input { stage: "shuffle" window: 2 }
              example_parse { feature { name: "image" type: "bytes" }
                              feature { name: "label" type: "int64" } } }
      stage { name: "decode" type: "image_decode" replicas: )"
                                  + std::to_string(decode_replicas) + R"(
              input { stage: "parse" window: 2 }
              image_decode { channels: 1 height: 10 width: 10
                             op: "random_resized_crop" random_flip: true } }
      stage { name: "batch" type: "batcher" input { stage: "decode" }
              batcher { batch_size: 16 } }
      stage { name: "sink" type: "collect" input { stage: "batch" } })");
    REQUIRE(r.ok);
    return obs->collected;
  };
  auto a = run_with(1, 1);
  auto b = run_with(2, 3);
  REQUIRE(a.size() == b.size());
  REQUIRE(a.size() == 8);  // 120 records in batches of 16
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].at("label") == b[i].at("label"));
    CHECK(a[i].at("image") == b[i].at("image"));
  }
}

TEST_CASE("deterministic mode refuses stages it cannot order",
          "[input][topology]") {
  auto reg = make_registry(std::make_shared<observations>());
  auto r = load_topology_text(R"(runtime { deterministic: true }
stage { name: "src" type: "synthetic_source" replicas: 2 }
stage { name: "sink" type: "sink" input { stage: "src" } })",
                              "d.pbtxt", reg);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.errors.at(0).to_string(),
             Catch::Contains("d.pbtxt:2: stage 'src' (synthetic_source) has "
                             "several replicas"));
}
