// image_decode: random crops and flips by seed, images it cannot or must
// not decode refused by name, and devices it does not know.
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

TEST_CASE_METHOD(fixture, "random crops and flips are the same for the same "
                          "seed and differ for another",
                 "[input]") {
  temp_dir dir;
  // Images with structure, so that crops and flips change pixels.
  tfrecord_writer w;
  REQUIRE(w.open(dir.file("data-0.tfrecord")));
  jpeg_codec codec;
  for (int i = 0; i < 16; ++i) {
    std::vector<uint8_t> px(64 * 48 * 3);
    for (size_t k = 0; k < px.size(); ++k)
      px[k] = static_cast<uint8_t>((k * 31 + static_cast<size_t>(i) * 17)
                                   % 251);
    std::string jpg;
    REQUIRE(codec.encode(px.data(), 64, 48, 3, 90, jpg));
    REQUIRE(w.write(example(jpg, i)));
  }
  REQUIRE(w.close());
  auto run_with_seed = [&](int seed, int replicas) {
    obs->collected.clear();
    auto text = pipeline(dir, R"(
      stage { name: "decode" type: "image_decode" replicas: )"
                                + std::to_string(replicas) + R"(
              input { stage: "parse" }
              image_decode { height: 24 width: 24 op: "random_resized_crop"
                             random_flip: true mean: 0.5 std: 0.25 } }
      stage { name: "sink" type: "collect" input { stage: "decode" } }
    )");
    text.replace(text.find("seed: 7"), 7, "seed: " + std::to_string(seed));
    auto r = run_text(sys, reg, text);
    REQUIRE(r.ok);
    // label -> image, independent of arrival order
    std::map<int64_t, std::vector<float>> by_label;
    for (auto& b : obs->collected)
      for (int64_t i = 0; i < b.records(); ++i) {
        auto* p = b.at("image").data_as<float>() + i * 24 * 24 * 3;
        by_label[b.at("label").data_as<int64_t>()[i]].assign(
          p, p + 24 * 24 * 3);
      }
    return by_label;
  };
  auto a = run_with_seed(1, 1);
  auto b = run_with_seed(1, 3);
  auto c = run_with_seed(2, 1);
  REQUIRE(a.size() == 16);
  CHECK(a == b);
  CHECK(a != c);
}

TEST_CASE_METHOD(fixture, "images that cannot or must not be decoded are "
                          "refused by policy",
                 "[input][bad-input]") {
  temp_dir dir;
  // A real 1x1 JPEG, bytes that are not a JPEG, and a JPEG whose header
  // claims 20000 x 20000 pixels.
  auto tiny = gray_jpeg(1, 1, 200);
  auto big = gray_jpeg(16, 16, 10);
  bool patched = false;
  for (size_t i = 0; i + 9 < big.size(); ++i)
    if (static_cast<unsigned char>(big[i]) == 0xff
        && static_cast<unsigned char>(big[i + 1]) == 0xc0) {
      // SOF0: length(2) precision(1) height(2) width(2)
      big[i + 5] = static_cast<char>(20000 >> 8);
      big[i + 6] = static_cast<char>(20000 & 0xff);
      big[i + 7] = static_cast<char>(20000 >> 8);
      big[i + 8] = static_cast<char>(20000 & 0xff);
      patched = true;
      break;
    }
  REQUIRE(patched);
  tfrecord_writer w;
  REQUIRE(w.open(dir.file("data-0.tfrecord")));
  REQUIRE(w.write(example(tiny, 0)));
  REQUIRE(w.write(example("not a jpeg at all", 1)));
  REQUIRE(w.write(example(big, 2)));
  REQUIRE(w.write(example(tiny, 3)));
  REQUIRE(w.close());
  auto decode = [&](const std::string& policy) {
    obs->collected.clear();
    return run_text(sys, reg, pipeline(dir, R"(
      stage { name: "decode" type: "image_decode" input { stage: "parse" }
              image_decode { channels: 1 height: 4 width: 4 dtype: "u8"
                             max_pixels: 100000000 on_error: ")"
                                              + policy + R"(" } }
      stage { name: "sink" type: "collect" input { stage: "decode" } })"));
  };
  auto failed = decode("fail");
  CHECK_FALSE(failed.ok);
  CHECK_THAT(failed.error, Catch::Contains("data-0.tfrecord@"));
  CHECK_THAT(failed.error, Catch::Contains("not a JPEG, PNG or WebP image"));
  auto skipped = decode("skip");
  REQUIRE(skipped.ok);
  auto labels = labels_of(obs->collected);
  CHECK(labels == std::vector<int64_t>{0, 3});
  for (auto& b : obs->collected)
    for (int64_t i = 0; i < b.records(); ++i)
      CHECK(std::abs(int{b.at("image").data_as<uint8_t>()[i * 16]} - 200)
            <= 2);
  // The pixel limit refuses the 20000 x 20000 header without allocating.
  jpeg_codec codec;
  image out;
  CHECK_FALSE(codec.decode(big, 1, 100000000, out));
  CHECK_THAT(codec.error(), Catch::Contains("20000x20000 exceeds the limit"));
  CHECK(out.pixels.capacity() == 0);
}

TEST_CASE("image_decode refuses a device it does not know, and names the "
          "device it cannot open",
          "[input]") {
  auto stage = [](const std::string& device) {
    topology::Stage s;
    REQUIRE(google::protobuf::TextFormat::ParseFromString(
      "name: \"decode\" type: \"image_decode\" image_decode { height: 8 "
      "width: 8 device: \""
        + device + "\" }",
      &s));
    return s;
  };
  auto type = image_decode_type();
  CHECK_THAT(type.check(stage("tpu")),
             Catch::Contains("image_decode.device must be \"cpu\", \"cuda\" "
                             "or \"cuda:N\", got \"tpu\""));
  CHECK_THAT(type.check(stage("cuda:")), Catch::Contains("got \"cuda:\""));
  CHECK(type.check(stage("cuda:1")).empty());
  CHECK(type.check(stage("cpu")).empty());
  stage_info info;
  info.name = "decode";
  CHECK(type.make(info, stage("cpu")) != nullptr);
  std::string why;
  if (gpu::nvjpeg_available(&why))
    return; // the device exists here: tests/actors/image_decode_gpu_test.cpp
  CHECK_THROWS_WITH(type.make(info, stage("cuda")),
                    Catch::Contains("device \"cuda\": ")
                      && Catch::Contains(why));
}
