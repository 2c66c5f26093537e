// image_decode on PNG and WebP next to JPEG, in one stream: the format comes
// from each record's bytes. PNG and lossless WebP of the same pixels give
// the same output; a corrupt image fails the stage naming its record, or is
// skipped by policy, as a JPEG would be.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <spng.h>
#include <webp/encode.h>

#include "actorflow/proto/example.pb.h"
#include "actorflow/runtime/formats/tfrecord_writer.hpp"
#include "actorflow/runtime/image/jpeg.hpp"
#include "tests/support/harness.hpp"
#include "tests/support/temp_dir.hpp"

using namespace af;
using namespace af::test;

namespace {

constexpr int width = 24, height = 18;

std::vector<uint8_t> pixels() {
  std::vector<uint8_t> px(static_cast<size_t>(width) * height * 3);
  for (size_t i = 0; i < px.size(); ++i)
    px[i] = static_cast<uint8_t>(i * 37 % 251);
  return px;
}

std::string png_of(const std::vector<uint8_t>& rgb) {
  spng_ctx* ctx = spng_ctx_new(SPNG_CTX_ENCODER);
  REQUIRE(ctx != nullptr);
  spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
  spng_ihdr ihdr{};
  ihdr.width = width;
  ihdr.height = height;
  ihdr.color_type = SPNG_COLOR_TYPE_TRUECOLOR;
  ihdr.bit_depth = 8;
  REQUIRE(spng_set_ihdr(ctx, &ihdr) == 0);
  REQUIRE(spng_encode_image(ctx, rgb.data(), rgb.size(), SPNG_FMT_PNG,
                            SPNG_ENCODE_FINALIZE)
          == 0);
  size_t len = 0;
  int err = 0;
  auto* buf = static_cast<char*>(spng_get_png_buffer(ctx, &len, &err));
  REQUIRE(err == 0);
  std::string out{buf, len};
  std::free(buf);
  spng_ctx_free(ctx);
  return out;
}

std::string webp_of(const std::vector<uint8_t>& rgb) {
  uint8_t* out = nullptr;
  auto n = WebPEncodeLosslessRGB(rgb.data(), width, height, width * 3, &out);
  REQUIRE(n > 0);
  std::string s{reinterpret_cast<char*>(out), n};
  WebPFree(out);
  return s;
}

std::string example(const std::string& image, int64_t label) {
  tf::Example ex;
  auto& f = *ex.mutable_features()->mutable_feature();
  f["image"].mutable_bytes_list()->add_value(image);
  f["label"].mutable_int64_list()->add_value(label);
  return ex.SerializeAsString();
}

std::string job(const temp_dir& dir, const std::string& decode_extra) {
  return R"(
    runtime { seed: 3 }
    stage { name: "read" type: "tfrecord_source"
            tfrecord_source { files: ")"
         + dir.path() + R"(/data.tfrecord" records_per_item: 8 } }
    stage { name: "parse" type: "example_parse" input { stage: "read" }
            example_parse { feature { name: "image" type: "bytes" }
                            feature { name: "label" type: "int64" } } }
    stage { name: "decode" type: "image_decode" input { stage: "parse" }
            image_decode { channels: 3 height: 9 width: 12 dtype: "u8" )"
         + decode_extra + R"( } }
    stage { name: "sink" type: "collect" input { stage: "decode" } })";
}

// Output image of each label.
std::map<int64_t, std::vector<uint8_t>> by_label(const std::vector<batch>& items) {
  std::map<int64_t, std::vector<uint8_t>> out;
  for (auto& b : items) {
    auto& img = b.at("image");
    auto row = img.byte_size() / static_cast<size_t>(std::max<int64_t>(img.rows(), 1));
    for (int64_t i = 0; i < b.at("label").rows(); ++i) {
      auto* p = img.data_as<uint8_t>() + static_cast<size_t>(i) * row;
      out[b.at("label").data_as<int64_t>()[i]].assign(p, p + row);
    }
  }
  return out;
}

} // namespace

TEST_CASE_METHOD(fixture, "image_decode takes JPEG, PNG and WebP in one "
                          "stream, by content",
                 "[input][image]") {
  temp_dir dir;
  auto rgb = pixels();
  std::string jpeg;
  jpeg_codec codec;
  REQUIRE(codec.encode(rgb.data(), width, height, 3, 95, jpeg));
  auto png = png_of(rgb), webp = webp_of(rgb);
  auto corrupt = png;
  corrupt[corrupt.find("IDAT") + 8] ^= 0x33; // the data's CRC no longer fits
  tfrecord_writer w;
  REQUIRE(w.open(dir.file("data.tfrecord")));
  REQUIRE(w.write(example(png, 0)));
  REQUIRE(w.write(example(webp, 1)));
  REQUIRE(w.write(example(jpeg, 2)));
  REQUIRE(w.write(example(corrupt, 99)));
  REQUIRE(w.write(example(png, 3)));
  REQUIRE(w.close());

  SECTION("a corrupt PNG fails the stage, naming its record") {
    auto r = run_text(sys, reg, job(dir, ""));
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.error, Catch::Contains("data.tfrecord@"));
    CHECK_THAT(r.error, Catch::Contains("cannot decode the PNG image: "));
  }
  SECTION("skipped by policy, the rest decode alike") {
    auto r = run_text(sys, reg, job(dir, R"(on_error: "skip")"));
    REQUIRE(r.ok);
    auto out = by_label(obs->collected);
    REQUIRE(out.size() == 4);
    CHECK(out.count(99) == 0);
    // PNG and lossless WebP: the same pixels, so the same bytes out; the
    // JPEG close to them (quality 95).
    REQUIRE(out[0].size() == 9 * 12 * 3);
    CHECK(out[0] == out[1]);
    CHECK(out[0] == out[3]);
    double diff = 0;
    for (size_t i = 0; i < out[0].size(); ++i)
      diff += std::abs(int{out[0][i]} - int{out[2][i]});
    CHECK(diff / static_cast<double>(out[0].size()) < 12);
  }
}
