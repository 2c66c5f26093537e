// take and skip: the sources stop once take has its records.
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

TEST_CASE_METHOD(fixture, "take stops the sources once it has its records, "
                          "skip drops the first ones",
                 "[input]") {
  auto r = run_text(sys, reg, R"(
    stage { name: "src" type: "synthetic_source"
            synthetic_source { records: 100000000 records_per_item: 64 } }
    stage { name: "take" type: "take" input { stage: "src" }
            take { count: 1000 } }
    stage { name: "skip" type: "skip" input { stage: "take" }
            skip { count: 100 } }
    stage { name: "sink" type: "collect" input { stage: "skip" } }
  )");
  REQUIRE(r.ok);
  int64_t records = 0;
  for (auto& b : obs->collected)
    records += b.records();
  CHECK(records == 900);
  // The source stopped long before its 10^8 records.
  CHECK(stats_of(r, "src[0]").records_out < 100000);
  auto& first = obs->collected.front().at("label");
  CHECK(first.data_as<int64_t>()[0] == 100 % 10);
}
