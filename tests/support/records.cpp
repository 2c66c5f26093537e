// The input stages' test data (tests/support/records.hpp).
#include "tests/support/records.hpp"

#include <catch2/catch.hpp>

#include "actorflow/proto/example.pb.h"
#include "actorflow/runtime/formats/tfrecord_writer.hpp"
#include "actorflow/runtime/image/jpeg.hpp"

namespace af::test {

std::string gray_jpeg(int w, int h, uint8_t value) {
  std::vector<uint8_t> px(static_cast<size_t>(w) * h, value);
  jpeg_codec codec;
  std::string out;
  REQUIRE(codec.encode(px.data(), w, h, 1, 95, out));
  return out;
}

std::string example(const std::string& image, int64_t label) {
  tf::Example ex;
  auto& f = *ex.mutable_features()->mutable_feature();
  f["image"].mutable_bytes_list()->add_value(image);
  f["label"].mutable_int64_list()->add_value(label);
  f["weight"].mutable_float_list()->add_value(0.5f);
  return ex.SerializeAsString();
}

std::vector<std::string> write_dataset(const temp_dir& dir, int files,
                                       int per_file, int size) {
  std::vector<std::string> paths;
  int index = 0;
  for (int f = 0; f < files; ++f) {
    tfrecord_writer w;
    auto path = dir.file("data-" + std::to_string(f) + ".tfrecord");
    REQUIRE(w.open(path));
    for (int r = 0; r < per_file; ++r, ++index)
      REQUIRE(w.write(
        example(gray_jpeg(size, size, static_cast<uint8_t>(index * 7 % 256)),
                index)));
    REQUIRE(w.close());
    paths.push_back(path);
  }
  return paths;
}

std::string pipeline(const temp_dir& dir, const std::string& middle,
                     const std::string& reader_extra,
                     int reader_replicas) {
  return R"(
    runtime { seed: 7 }
    stage { name: "read" type: "tfrecord_source" replicas: )"
         + std::to_string(reader_replicas) + R"(
            tfrecord_source { files: ")"
         + dir.path() + R"(/data-*.tfrecord" records_per_item: 8 )"
         + reader_extra + R"( } }
    stage { name: "parse" type: "example_parse" input { stage: "read" }
            example_parse { feature { name: "image" type: "bytes" }
                            feature { name: "label" type: "int64" }
                            feature { name: "weight" type: "float" } } }
  )" + middle;
}

std::vector<int64_t> labels_of(const std::vector<batch>& items) {
  std::vector<int64_t> out;
  for (auto& b : items) {
    auto& l = b.at("label");
    for (int64_t i = 0; i < l.rows(); ++i)
      out.push_back(l.data_as<int64_t>()[i]);
  }
  return out;
}


topology::Stage tfrecord_stage(const temp_dir& dir, int64_t per_item,
                               int64_t epochs) {
  topology::Stage s;
  s.set_name("read");
  s.set_type("tfrecord_source");
  s.mutable_tfrecord_source()->add_files(dir.path() + "/data-*.tfrecord");
  s.mutable_tfrecord_source()->set_records_per_item(per_item);
  s.mutable_tfrecord_source()->set_interleave(2);
  s.mutable_tfrecord_source()->set_epochs(epochs);
  return s;
}

} // namespace af::test
