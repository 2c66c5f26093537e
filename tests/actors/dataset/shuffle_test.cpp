// shuffle: a permutation that depends on the seed.
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

TEST_CASE_METHOD(fixture, "shuffle emits a permutation that depends on the "
                          "seed and the epoch",
                 "[input]") {
  temp_dir dir;
  write_dataset(dir, 2, 50);
  auto order = [&](int seed) {
    obs->collected.clear();
    auto text = pipeline(dir, R"(
      stage { name: "shuffle" type: "shuffle" input { stage: "parse" }
              shuffle { buffer_size: 30 records_per_item: 7 } }
      stage { name: "sink" type: "collect" input { stage: "shuffle" } }
    )",
                         "epochs: 2");
    text.replace(text.find("seed: 7"), 7, "seed: " + std::to_string(seed));
    auto r = run_text(sys, reg, text);
    REQUIRE(r.ok);
    return labels_of(obs->collected);
  };
  auto a = order(3);
  REQUIRE(a.size() == 200);
  std::vector<int64_t> first(a.begin(), a.begin() + 100);
  std::vector<int64_t> second(a.begin() + 100, a.end());
  auto sorted_first = first;
  std::sort(sorted_first.begin(), sorted_first.end());
  for (int i = 0; i < 100; ++i)
    REQUIRE(sorted_first[static_cast<size_t>(i)] == i);  // epochs don't mix
  CHECK(first != second);                               // new order each epoch
  std::vector<int64_t> identity(100);
  for (int i = 0; i < 100; ++i)
    identity[static_cast<size_t>(i)] = i;
  CHECK(first != identity);
  CHECK(order(3) == a);  // same seed, same order
  CHECK(order(4) != a);
}
