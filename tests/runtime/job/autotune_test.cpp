// autotune (runtime/job/autotune.hpp): the expensive stage gets the
// replicas and the windows.
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

TEST_CASE_METHOD(fixture, "autotune gives the expensive stage the replicas "
                          "and fits windows to the RAM budget",
                 "[input][autotune]") {
  auto loaded = load_topology_text(R"(
    stage { name: "src" type: "synthetic_source"
            synthetic_source { records: 100000000 record_bytes: 1000
                               records_per_item: 16 } }
    stage { name: "cheap" type: "transform" input { stage: "src" }
            transform { touch_payload: false } }
    stage { name: "costly" type: "transform" input { stage: "cheap" }
            transform { work_ns_per_record: 20000 touch_payload: false } }
    stage { name: "sink" type: "sink" input { stage: "costly" } })",
                                   "t", reg);
  REQUIRE(loaded.ok());
  autotune_budget budget;
  budget.cpus = 4;
  budget.ram_bytes = 3 * 16 * 1100 * 4;  // room for ~4 items per edge
  budget.seconds = 0.5;
  auto r = autotune(sys, *loaded.topology, reg, budget);
  auto& spec = r.tuned.spec;
  CHECK(replicas_of(spec.stage(2)) >= 3);  // costly
  CHECK(replicas_of(spec.stage(1)) == 1);  // cheap
  CHECK(replicas_of(spec.stage(0)) == 1);  // sources are left alone
  // src -> cheap: 1 pair, ~16 KiB items, 1/3 of the budget each edge.
  CHECK(window_of(spec.stage(1).input(0)) <= 4);
  CHECK(window_of(spec.stage(1).input(0)) >= 2);
  bool explained = false;
  for (auto& d : r.decisions)
    if (d.find("costly replicas 1 -> ") != std::string::npos
        && d.find("of the pipeline's CPU") != std::string::npos)
      explained = true;
  CHECK(explained);
}
