// cache: the first epoch replayed without running the stages before it.
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

TEST_CASE_METHOD(fixture, "cache replays the first epoch without running "
                          "the stages before it again, in memory or spilled",
                 "[input]") {
  for (const char* limit : {"1000000000", "2000"}) {
    obs->collected.clear();
    auto r = run_text(sys, reg, std::string{R"(
      stage { name: "src" type: "synthetic_source"
              synthetic_source { records: 1000 record_bytes: 16
                                 records_per_item: 10 } }
      stage { name: "cache" type: "cache" input { stage: "src" }
              cache { epochs: 3 max_memory_bytes: )"}
                                   + limit + R"( } }
      stage { name: "sink" type: "collect" input { stage: "cache" } }
    )");
    REQUIRE(r.ok);
    CHECK(stats_of(r, "src[0]").records_out == 1000);
    REQUIRE(obs->collected.size() == 300);
    std::vector<int64_t> per_epoch(3, 0);
    for (auto& b : obs->collected)
      per_epoch.at(b.epoch) += b.records();
    CHECK(per_epoch == std::vector<int64_t>{1000, 1000, 1000});
    // Replayed items carry the same records as the first pass.
    for (size_t i = 0; i < 100; ++i) {
      CHECK(obs->collected[i].at("x") == obs->collected[i + 100].at("x"));
      CHECK(obs->collected[i].at("x") == obs->collected[i + 200].at("x"));
    }
  }
}
