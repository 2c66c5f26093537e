// Stages that drop or replay items (filter, take, cache) keep the
// sequence numbers that deterministic mode orders by.
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

TEST_CASE_METHOD(fixture, "stages that drop or replay items keep sequence "
                          "numbers usable for deterministic mode",
                 "[input]") {
  auto r = run_text(sys, reg, R"(
    runtime { deterministic: true }
    stage { name: "src" type: "synthetic_source"
            synthetic_source { records: 1000 records_per_item: 10 } }
    stage { name: "skip" type: "skip" input { stage: "src" }
            skip { count: 95 } }
    stage { name: "cache" type: "cache" input { stage: "skip" }
            cache { epochs: 2 } }
    stage { name: "map" type: "transform" replicas: 3
            input { stage: "cache" window: 2 } }
    stage { name: "batch" type: "batcher" input { stage: "map" }
            batcher { batch_size: 50 } }
    stage { name: "sink" type: "collect" input { stage: "batch" } })");
  REQUIRE(r.ok);
  int64_t records = 0;
  for (auto& b : obs->collected)
    records += b.records();
  CHECK(records == 2 * 905);
}
