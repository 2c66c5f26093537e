// example_parse: every valid encoding of a tf.Example read the way
// protobuf reads it.
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

namespace {

// Hand-made protobuf wire format, for encodings TensorFlow's writer never
// produces but parsers must accept.
std::string varint(uint64_t v) {
  std::string out;
  do {
    auto b = static_cast<char>(v & 0x7f);
    v >>= 7;
    out.push_back(static_cast<char>(b | (v ? 0x80 : 0)));
  } while (v);
  return out;
}

std::string field(uint32_t number, const std::string& payload) {
  return varint((number << 3) | 2) + varint(payload.size()) + payload;
}

std::string entry(const std::string& name, const std::string& feature,
                  bool value_first = false) {
  return field(1, value_first ? field(2, feature) + field(1, name)
                              : field(1, name) + field(2, feature));
}

std::string float_bits(float f) {
  std::string s(4, '\0');
  std::memcpy(s.data(), &f, 4);
  return s;
}

} // namespace

TEST_CASE("example_parse reads every valid encoding the way protobuf does",
          "[input]") {
  auto reg = make_registry(std::make_shared<observations>());
  topology::Stage s;
  s.set_type("example_parse");
  auto* c = s.mutable_example_parse();
  auto* a = c->add_feature();
  a->set_name("x");
  a->set_type("float");
  a->add_shape(2);
  auto* b = c->add_feature();
  b->set_name("y");
  b->set_type("int64");
  auto* d = c->add_feature();
  d->set_name("z");
  d->set_type("bytes");
  auto packed_x = field(2, field(1, float_bits(1.5f) + float_bits(-2.0f)));
  auto unpacked_x = field(2, varint((1 << 3) | 5) + float_bits(1.5f)
                               + varint((1 << 3) | 5) + float_bits(-2.0f));
  auto y = field(3, field(1, varint(static_cast<uint64_t>(int64_t{-7}))));
  auto unpacked_y = field(3, varint(1 << 3)
                               + varint(static_cast<uint64_t>(int64_t{-7})));
  auto z = field(1, field(1, "zz"));
  std::vector<std::string> records{
    // the usual encoding
    field(1, entry("x", packed_x) + entry("y", y) + entry("z", z)),
    // unpacked numbers
    field(1, entry("x", unpacked_x) + entry("y", unpacked_y) + entry("z", z)),
    // value before key, an unknown feature, unknown top-level field
    field(1, entry("x", packed_x, true) + entry("other", z) + entry("y", y)
               + entry("z", z))
      + varint(7 << 3) + varint(1),
    // `features` twice (merged), a name repeated (last wins)
    field(1, entry("x", field(1, field(1, "no"))) + entry("y", y))
      + field(1, entry("x", packed_x) + entry("z", z)),
  };
  std::vector<std::string_view> views(records.begin(), records.end());
  batch item;
  item.set("record", tensor::strings(views));
  auto logic = reg.find("example_parse")->make(stage_info{}, s);
  collecting_emitter out;
  logic->process(std::move(item), out);
  REQUIRE(out.items.size() == 1);
  auto& r = out.items[0];
  for (int64_t i = 0; i < 4; ++i) {
    INFO("record " << i);
    CHECK(r.at("x").data_as<float>()[2 * i] == 1.5f);
    CHECK(r.at("x").data_as<float>()[2 * i + 1] == -2.0f);
    CHECK(r.at("y").data_as<int64_t>()[i] == -7);
    CHECK(r.at("z").string_at(i) == "zz");
  }
}
