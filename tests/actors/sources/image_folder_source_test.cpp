// image_folder_source: images labelled by their class folder.
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

TEST_CASE_METHOD(fixture, "an image folder becomes images labelled by "
                          "class",
                 "[input]") {
  temp_dir dir;
  for (auto cls : {"cat", "ant"}) {
    std::filesystem::create_directories(dir.file(cls));
    for (int i = 0; i < 3; ++i)
      dir.write(std::string{cls} + "/" + std::to_string(i) + ".jpg",
                gray_jpeg(8, 8, cls[0] == 'c' ? 200 : 50));
  }
  auto r = run_text(sys, reg, R"(
    stage { name: "files" type: "image_folder_source" replicas: 2
            image_folder_source { dir: ")"
                                + dir.path() + R"(" } }
    stage { name: "decode" type: "image_decode" input { stage: "files" }
            image_decode { channels: 1 height: 4 width: 4 dtype: "u8" } }
    stage { name: "sink" type: "collect" input { stage: "decode" } })");
  REQUIRE(r.ok);
  int64_t n = 0;
  for (auto& b : obs->collected)
    for (int64_t i = 0; i < b.records(); ++i, ++n) {
      auto label = b.at("label").data_as<int64_t>()[i];
      auto px = int{b.at("image").data_as<uint8_t>()[i * 16]};
      CHECK(std::abs(px - (label == 0 ? 50 : 200)) <= 2);  // ant = 0
    }
  CHECK(n == 6);
}
