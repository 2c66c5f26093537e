// Colour jitter (image_decode's brightness, contrast, saturation): the
// arithmetic of runtime/image/image_ops.hpp, and the stage applying one factor
// per image, drawn from the record, on top of the same crop.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "actorflow/proto/example.pb.h"
#include "actorflow/runtime/formats/tfrecord_writer.hpp"
#include "actorflow/runtime/image/image_ops.hpp"
#include "actorflow/runtime/image/jpeg.hpp"
#include "actorflow/runtime/topology/topology.hpp"
#include "tests/support/harness.hpp"
#include "tests/support/temp_dir.hpp"

using namespace af;
using namespace af::test;

namespace {

float gray(const float* p) {
  return 0.299f * p[0] + 0.587f * p[1] + 0.114f * p[2];
}

// 12 colour JPEGs of 32 x 24, each a different smooth picture.
void write_images(const temp_dir& dir) {
  tfrecord_writer w;
  REQUIRE(w.open(dir.file("data.tfrecord")));
  jpeg_codec codec;
  for (int k = 0; k < 12; ++k) {
    std::vector<uint8_t> px(32 * 24 * 3);
    for (int y = 0; y < 24; ++y)
      for (int x = 0; x < 32; ++x)
        for (int c = 0; c < 3; ++c)
          px[(y * 32 + x) * 3 + c] =
            static_cast<uint8_t>(40 + x * 3 + y * 2 + c * 30 + k * 4);
    std::string jpg;
    REQUIRE(codec.encode(px.data(), 32, 24, 3, 95, jpg));
    tf::Example ex;
    auto& f = *ex.mutable_features()->mutable_feature();
    f["image"].mutable_bytes_list()->add_value(jpg);
    f["label"].mutable_int64_list()->add_value(k);
    REQUIRE(w.write(ex.SerializeAsString()));
  }
  REQUIRE(w.close());
}

std::string job(const temp_dir& dir, const std::string& jitter,
                const std::string& channels = "3") {
  return R"(
    runtime { seed: 5 }
    stage { name: "read" type: "tfrecord_source"
            tfrecord_source { files: ")"
         + dir.file("data.tfrecord") + R"(" records_per_item: 4 } }
    stage { name: "parse" type: "example_parse" input { stage: "read" }
            example_parse { feature { name: "image" type: "bytes" }
                            feature { name: "label" type: "int64" } } }
    stage { name: "decode" type: "image_decode" input { stage: "parse" }
            image_decode { channels: )"
         + channels + R"( height: 12 width: 16 op: "random_resized_crop"
                           random_flip: true )"
         + jitter + R"( } }
    stage { name: "sink" type: "collect" input { stage: "decode" } })";
}

// Each label's output values (f32, mean 0, std 1: v / 255).
std::map<int64_t, std::vector<float>> images(const std::vector<batch>& items) {
  std::map<int64_t, std::vector<float>> out;
  for (auto& b : items) {
    auto& t = b.at("image");
    size_t per = 12 * 16 * 3;
    for (int64_t i = 0; i < b.records(); ++i) {
      auto* p = t.data_as<float>() + static_cast<size_t>(i) * per;
      out[b.at("label").data_as<int64_t>()[i]].assign(p, p + per);
    }
  }
  return out;
}

} // namespace

TEST_CASE("colour jitter's arithmetic", "[image][jitter]") {
  std::vector<float> v{0.5f, 0.2f, 0.1f, 0.9f, 0.8f, 0.7f};
  SECTION("factors of 1 change nothing") {
    auto w = v;
    color_jitter(w.data(), 2, 3, color_factors{});
    CHECK(w == v);
  }
  SECTION("brightness scales, clamped to 1") {
    color_jitter(v.data(), 2, 3, color_factors{1.5f, 1, 1});
    CHECK(v[0] == Approx(0.75f));
    CHECK(v[1] == Approx(0.3f));
    CHECK(v[3] == 1.0f);
  }
  SECTION("contrast 0 leaves the mean gray everywhere") {
    auto mean = (gray(&v[0]) + gray(&v[3])) / 2;
    color_jitter(v.data(), 2, 3, color_factors{1, 0, 1});
    for (auto x : v)
      CHECK(x == Approx(mean));
  }
  SECTION("saturation 0 gives each pixel its gray, 2 doubles the colour") {
    auto g0 = gray(&v[0]);
    auto w = v;
    color_jitter(w.data(), 2, 3, color_factors{1, 1, 0});
    CHECK((w[0] == Approx(g0) && w[1] == Approx(g0) && w[2] == Approx(g0)));
    w = v;
    color_jitter(w.data(), 2, 3, color_factors{1, 1, 2});
    CHECK(w[0] == Approx(std::min(1.0f, g0 + 2 * (v[0] - g0))));
    CHECK(w[2] == Approx(std::max(0.0f, g0 + 2 * (v[2] - g0))));
  }
  SECTION("draws stay in [max(0, 1 - x), 1 + x]") {
    record_rng rng{1, 2, 3};
    std::set<float> seen;
    for (int i = 0; i < 200; ++i) {
      auto f = draw_color_factors(rng, 0.4, 1.5, 0);
      CHECK((f.brightness >= 0.6f && f.brightness <= 1.4f));
      CHECK((f.contrast >= 0.0f && f.contrast <= 2.5f));
      CHECK(f.saturation == 1.0f);
      seen.insert(f.brightness);
    }
    CHECK(seen.size() > 100);
  }
}

TEST_CASE_METHOD(fixture, "image_decode jitters each image by its own "
                          "factor, on the crop it had without jitter",
                 "[image][jitter][input]") {
  temp_dir dir;
  write_images(dir);
  auto run = [&](const std::string& jitter) {
    obs->collected.clear();
    auto r = run_text(sys, reg, job(dir, jitter));
    REQUIRE(r.ok);
    return images(obs->collected);
  };
  auto base = run("");
  REQUIRE(base.size() == 12);
  SECTION("brightness: every value times one factor per image") {
    auto bright = run("brightness: 0.4");
    CHECK(run("brightness: 0.4") == bright); // drawn from the record
    std::set<int> factors;
    for (auto& [label, v] : base) {
      auto& w = bright[label];
      REQUIRE(w.size() == v.size());
      auto b = w[0] / v[0];
      CHECK((b >= 0.6f - 1e-4f && b <= 1.4f + 1e-4f));
      for (size_t i = 0; i < v.size(); ++i)
        REQUIRE(w[i] == Approx(std::min(1.0f, v[i] * b)).margin(2e-5));
      factors.insert(static_cast<int>(b * 1000));
    }
    CHECK(factors.size() > 6); // a factor per image, not one for all
  }
  SECTION("saturation: each pixel keeps its gray value") {
    auto sat = run("saturation: 0.5");
    bool changed = false;
    for (auto& [label, v] : base)
      for (size_t p = 0; p < v.size(); p += 3) {
        auto* w = &sat[label][p];
        if (w[0] <= 0 || w[0] >= 1 || w[1] <= 0 || w[1] >= 1 || w[2] <= 0
            || w[2] >= 1)
          continue; // clamped
        REQUIRE(gray(w) == Approx(gray(&v[p])).margin(1e-5));
        changed = changed || std::abs(w[0] - v[p]) > 1e-3f;
      }
    CHECK(changed);
  }
  SECTION("amounts of 0 are no jitter") {
    CHECK(run("brightness: 0 contrast: 0 saturation: 0") == base);
  }
}

TEST_CASE_METHOD(fixture, "colour jitter settings that cannot work are "
                          "refused when the topology is checked",
                 "[image][jitter][bad-input]") {
  temp_dir dir;
  write_images(dir);
  auto refused = [&](const std::string& jitter, const std::string& channels,
                     const std::string& why) {
    auto loaded = load_topology_text(job(dir, jitter, channels), "j.pbtxt",
                                     reg);
    REQUIRE_FALSE(loaded.ok());
    CHECK_THAT(loaded.errors.at(0).to_string(), Catch::Contains(why));
  };
  refused("saturation: 0.3", "1", "image_decode.saturation needs channels: 3");
  refused("brightness: -0.1", "3",
          "brightness, contrast and saturation must be finite and >= 0");
  refused("contrast: 0.2 device: \"cuda\"", "3",
          "colour jitter (brightness, contrast, saturation) runs on the CPU "
          "only");
}
