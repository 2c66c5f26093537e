// The input-pipeline stages on real files: TFRecord shards of tf.Example
// records holding JPEG images, through the stage actors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include <google/protobuf/text_format.h>

#include "actors/image_decode.hpp"
#include "gpu/jpeg_decoder.hpp"
#include "proto/example.pb.h"
#include "runtime/autotune.hpp"
#include "runtime/jpeg.hpp"
#include "runtime/registry.hpp"
#include "runtime/tfrecord_writer.hpp"
#include "tests/support/harness.hpp"
#include "tests/support/temp_dir.hpp"

using namespace af;
using namespace af::test;

namespace {

// A w x h gray JPEG whose pixels all equal `value`.
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

// `files` shards of `per_file` records; record label = global index, image
// gray value = (index * 7) % 256.
std::vector<std::string> write_dataset(const temp_dir& dir, int files,
                                       int per_file, int size = 16) {
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
                     const std::string& reader_extra = "",
                     int reader_replicas = 1) {
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

} // namespace

TEST_CASE_METHOD(fixture, "TFRecord shards of JPEG Examples decode to the "
                          "pixels and labels that were written",
                 "[input]") {
  temp_dir dir;
  write_dataset(dir, 3, 20);
  auto r = run_text(sys, reg, pipeline(dir, R"(
    stage { name: "decode" type: "image_decode" replicas: 2
            input { stage: "parse" }
            image_decode { channels: 1 height: 8 width: 8 dtype: "u8" } }
    stage { name: "sink" type: "collect" input { stage: "decode" } }
  )"));
  REQUIRE(r.ok);
  auto labels = labels_of(obs->collected);
  REQUIRE(labels.size() == 60);
  std::sort(labels.begin(), labels.end());
  for (int i = 0; i < 60; ++i)
    CHECK(labels[static_cast<size_t>(i)] == i);
  for (auto& b : obs->collected) {
    auto& img = b.at("image");
    REQUIRE(img.type() == dtype::u8);
    REQUIRE(img.shape() == tensor::shape_type{b.records(), 8, 8, 1});
    CHECK(b.at("weight").type() == dtype::f32);
    CHECK(b.find("record") == nullptr);  // parsed away
    REQUIRE(b.find("key") != nullptr);
    for (int64_t i = 0; i < b.records(); ++i) {
      auto label = b.at("label").data_as<int64_t>()[i];
      auto want = static_cast<int>(label * 7 % 256);
      auto* px = img.data_as<uint8_t>() + i * 64;
      for (int k = 0; k < 64; ++k)
        REQUIRE(std::abs(int{px[k]} - want) <= 2);  // JPEG is lossy
    }
  }
}

TEST_CASE_METHOD(fixture, "files are sharded across reader replicas and "
                          "every record is read exactly once",
                 "[input]") {
  temp_dir dir;
  write_dataset(dir, 5, 13);
  auto r = run_text(sys, reg,
                    pipeline(dir, R"(
    stage { name: "sink" type: "collect" input { stage: "parse" } }
  )",
                             "interleave: 2 epochs: 2", 2));
  REQUIRE(r.ok);
  auto labels = labels_of(obs->collected);
  REQUIRE(labels.size() == 130);
  std::multiset<int64_t> seen(labels.begin(), labels.end());
  for (int i = 0; i < 65; ++i)
    CHECK(seen.count(i) == 2);
  CHECK(stats_of(r, "read[0]").items_out + stats_of(r, "read[1]").items_out
        > 0);
}

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

TEST_CASE_METHOD(fixture, "bad records stop the job naming file, offset or "
                          "feature, or are skipped and counted",
                 "[input][bad-input]") {
  temp_dir dir;
  auto paths = write_dataset(dir, 1, 10);
  auto content = temp_dir::read(paths[0]);
  SECTION("a flipped payload byte fails the job with file and offset") {
    content[12 + 20] ^= 0x10;  // inside record 0's data
    temp_dir::read(dir.write("data-0.tfrecord", content));
    auto r = run_text(sys, reg, pipeline(dir, R"(
      stage { name: "sink" type: "collect" input { stage: "parse" } })"));
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.error, Catch::Contains("data-0.tfrecord: offset 0: corrupt "
                                        "record data"));
  }
  SECTION("with on_corrupt: skip, the rest is read") {
    content[12 + 20] ^= 0x10;
    dir.write("data-0.tfrecord", content);
    auto r = run_text(sys, reg,
                      pipeline(dir, R"(
      stage { name: "sink" type: "collect" input { stage: "parse" } })",
                               "on_corrupt: \"skip\""));
    REQUIRE(r.ok);
    CHECK(labels_of(obs->collected).size() == 9);
  }
  SECTION("a missing feature names the feature and the record") {
    auto r = run_text(sys, reg,
                      pipeline(dir, R"(
      stage { name: "p2" type: "example_parse" input { stage: "parse" }
              example_parse { input: "image"
                              feature { name: "nope" type: "float" } } }
      stage { name: "sink" type: "collect" input { stage: "p2" } })"));
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.error, Catch::Contains("not a tf.Example"));
  }
  SECTION("a mistyped feature") {
    auto text = pipeline(dir, R"(
      stage { name: "sink" type: "collect" input { stage: "parse" } })");
    text.replace(text.find("name: \"label\" type: \"int64\""),
                 std::string("name: \"label\" type: \"int64\"").size(),
                 "name: \"label\" type: \"float\"");
    auto r = run_text(sys, reg, text);
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.error,
               Catch::Contains("data-0.tfrecord@0: feature 'label' holds "
                               "int64 values, declared float"));
  }
  SECTION("a wrong number of values") {
    auto text = pipeline(dir, R"(
      stage { name: "sink" type: "collect" input { stage: "parse" } })");
    text.replace(text.find("name: \"weight\" type: \"float\""),
                 std::string("name: \"weight\" type: \"float\"").size(),
                 "name: \"weight\" type: \"float\" shape: 2");
    auto r = run_text(sys, reg, text);
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.error, Catch::Contains("feature 'weight' has 1 values, its "
                                        "declared shape needs 2"));
  }
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

namespace {

// A tfrecord_source over write_dataset's files in `dir`.
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

} // namespace

TEST_CASE("a tfrecord_source restored from a snapshot continues exactly "
          "where it was",
          "[input]") {
  temp_dir dir;
  write_dataset(dir, 3, 11);
  registry reg = make_registry(std::make_shared<observations>());
  auto s = tfrecord_stage(dir, 4, 2);
  stage_info info{"read", "tfrecord_source", 0, 1, 0, nullptr};
  auto* type = reg.find("tfrecord_source");
  auto whole = type->make(info, s);
  collecting_emitter all;
  while (whole->produce(all)) {
  }
  auto first = type->make(info, s);
  collecting_emitter part;
  for (int i = 0; i < 7; ++i)
    REQUIRE(first->produce(part));
  auto state = first->snapshot();
  auto second = type->make(info, s);
  second->restore(state);
  while (second->produce(part)) {
  }
  REQUIRE(part.items.size() == all.items.size());
  for (size_t i = 0; i < all.items.size(); ++i)
    CHECK(part.items[i].at("record") == all.items[i].at("record"));
  CHECK_THROWS_AS(second->restore("garbage"), std::invalid_argument);
}

TEST_CASE("a source replica that takes over a lost one produces its share "
          "of every epoch from the one it was lost in",
          "[input]") {
  // Two replicas, three epochs; replica 1 is lost after it ended epoch 1
  // (from_epoch 1): its share must come from replica 0 for epochs 1 and 2,
  // whether replica 0 is behind it, ahead of it or done when told.
  temp_dir dir;
  write_dataset(dir, 5, 7);
  registry reg = make_registry(std::make_shared<observations>());
  auto tf = tfrecord_stage(dir, 3, 3);
  topology::Stage ctr;
  ctr.set_type("ctr_source");
  ctr.mutable_ctr_source()->set_records(35);
  ctr.mutable_ctr_source()->set_features(2);
  ctr.mutable_ctr_source()->set_vocabulary(10);
  ctr.mutable_ctr_source()->set_records_per_item(3);
  ctr.mutable_ctr_source()->set_epochs(3);
  for (auto* s : {&tf, &ctr}) {
    auto* type = reg.find(s->type());
    REQUIRE(type->reassignable);
    stage_info r0{"r", s->type(), 0, 2, 0, nullptr};
    stage_info r1{"r", s->type(), 1, 2, 0, nullptr};
    // Each replica alone, whole: which records are whose.
    std::map<int64_t, int> share0, share1;
    for (auto [info, share] : {std::pair{&r0, &share0}, {&r1, &share1}}) {
      auto whole = type->make(*info, *s);
      collecting_emitter out;
      while (whole->produce(out)) {
      }
      for (auto& b : out.items)
        for (int64_t i = 0; i < b.records(); ++i)
          ++(*share)[b.at("index").data_as<int64_t>()[i]];
    }
    REQUIRE(share0.size() + share1.size() == 35);
    // When replica 0 is told: after `calls` produce() calls (-1: done).
    for (int calls : {2, 15, 25, -1}) {
      INFO(s->type() << ", told after " << calls << " calls");
      auto heir = type->make(r0, *s);
      collecting_emitter out;
      bool more = true;
      for (int i = 0; (calls < 0 || i < calls) && more; ++i)
        more = heir->produce(out);
      if (calls < 0)
        REQUIRE_FALSE(more);
      heir->take_over(1, 1);
      while (heir->produce(out)) {
      }
      std::map<int64_t, int> seen;
      for (auto& b : out.items)
        for (int64_t i = 0; i < b.records(); ++i)
          ++seen[b.at("index").data_as<int64_t>()[i]];
      for (auto& [id, n] : share0)
        CHECK(seen[id] == n);
      for (auto& [id, n] : share1)
        CHECK(seen[id] == n - 1);
      CHECK(seen.size() == 35);
      CHECK(out.epochs_ended == std::vector<uint64_t>{0, 1, 2});
    }
  }
}

TEST_CASE("the batcher stacks bytes tensors and fixed tensors alike",
          "[input]") {
  registry reg = make_registry(std::make_shared<observations>());
  topology::Stage s;
  s.set_type("batcher");
  s.mutable_batcher()->set_batch_size(5);
  auto logic = reg.find("batcher")->make(stage_info{}, s);
  collecting_emitter out;
  for (int item = 0; item < 3; ++item) {
    std::vector<std::string> strs;
    std::vector<std::string_view> views;
    for (int i = 0; i < 3; ++i)
      strs.push_back(std::string(static_cast<size_t>(item * 3 + i), 'a' + i));
    for (auto& x : strs)
      views.push_back(x);
    batch b;
    b.set("s", tensor::strings(views));
    auto n = tensor::allocate(dtype::i32, {3, 2});
    for (int i = 0; i < 6; ++i)
      n.mutable_data_as<int32_t>()[i] = item * 6 + i;
    b.set("n", std::move(n));
    logic->process(std::move(b), out);
  }
  logic->finish(out);
  REQUIRE(out.items.size() == 2);
  CHECK(out.items[0].records() == 5);
  CHECK(out.items[1].records() == 4);
  CHECK(out.items[0].at("s").string_at(4).size() == 4);  // item 1, row 1
  CHECK(out.items[1].at("n").data_as<int32_t>()[7] == 17);
}

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

TEST_CASE_METHOD(fixture, "CSV files become typed columns and bad rows name "
                          "their line",
                 "[input]") {
  temp_dir dir;
  dir.write("a.csv", "id,name,score,unused\n"
                     "1,plain,0.5,x\n"
                     "2,\"quoted, with comma\",1.25,x\n"
                     "3,\"multi\nline\",-2,x\n"
                     "4,\"say \"\"hi\"\"\",3e2,x\n");
  auto text = [&](const std::string& file, const std::string& extra) {
    return R"(
      stage { name: "csv" type: "csv_source"
              csv_source { files: ")"
           + dir.file(file) + R"(" )" + extra + R"(
                           column { name: "score" type: "float" }
                           column { name: "id" type: "int64" }
                           column { name: "name" type: "string" } } }
      stage { name: "sink" type: "collect" input { stage: "csv" } })";
  };
  auto r = run_text(sys, reg, text("a.csv", ""));
  REQUIRE(r.ok);
  REQUIRE(obs->collected.size() == 1);
  auto& b = obs->collected[0];
  REQUIRE(b.records() == 4);
  CHECK(b.at("id").data_as<int64_t>()[3] == 4);
  CHECK(b.at("score").data_as<float>()[3] == 300.0f);
  CHECK(b.at("name").string_at(1) == "quoted, with comma");
  CHECK(b.at("name").string_at(2) == "multi\nline");
  CHECK(b.at("name").string_at(3) == "say \"hi\"");
  CHECK(b.at("key").string_at(3) == dir.file("a.csv") + ":6");

  dir.write("bad.csv", "id,name,score\n1,a,0.5\n2,b\n3,c,x\n");
  obs->collected.clear();
  auto failed = run_text(sys, reg, text("bad.csv", ""));
  CHECK_FALSE(failed.ok);
  CHECK_THAT(failed.error,
             Catch::Contains("bad.csv:3: row has 2 fields, expected 3"));
  auto skipped = run_text(sys, reg, text("bad.csv", "on_bad_row: \"skip\""));
  REQUIRE(skipped.ok);
  CHECK(obs->collected.at(0).records() == 1);

  dir.write("missing.csv", "id,score\n1,2\n");
  auto missing = run_text(sys, reg, text("missing.csv", ""));
  CHECK_FALSE(missing.ok);
  CHECK_THAT(missing.error,
             Catch::Contains("missing.csv:1: the header has no column "
                             "'name'"));
  dir.write("quote.csv", "id,name,score\n1,\"never closed,0.5\n");
  auto quote = run_text(sys, reg, text("quote.csv", ""));
  CHECK_FALSE(quote.ok);
  CHECK_THAT(quote.error, Catch::Contains("quote.csv:2: malformed CSV"));
}

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

TEST_CASE_METHOD(fixture, "deterministic mode gives the same batches for "
                          "the same seed whatever the replica counts",
                 "[input]") {
  temp_dir dir;
  write_dataset(dir, 3, 40, 20);
  auto run_with = [&](int parse_replicas, int decode_replicas) {
    obs->collected.clear();
    auto r = run_text(sys, reg, R"(
      runtime { seed: 11 deterministic: true }
      stage { name: "read" type: "tfrecord_source"
              tfrecord_source { files: ")"
                                  + dir.path() + R"(/data-*.tfrecord"
                                records_per_item: 3 interleave: 2 } }
      stage { name: "shuffle" type: "shuffle" input { stage: "read" }
              shuffle { buffer_size: 25 records_per_item: 5 } }
      stage { name: "parse" type: "example_parse" replicas: )"
                                  + std::to_string(parse_replicas) + R"(
              input { stage: "shuffle" window: 2 }
              example_parse { feature { name: "image" type: "bytes" }
                              feature { name: "label" type: "int64" } } }
      stage { name: "decode" type: "image_decode" replicas: )"
                                  + std::to_string(decode_replicas) + R"(
              input { stage: "parse" window: 2 }
              image_decode { channels: 1 height: 10 width: 10
                             op: "random_resized_crop" random_flip: true } }
      stage { name: "batch" type: "batcher" input { stage: "decode" }
              batcher { batch_size: 16 } }
      stage { name: "sink" type: "collect" input { stage: "batch" } })");
    REQUIRE(r.ok);
    return obs->collected;
  };
  auto a = run_with(1, 1);
  auto b = run_with(2, 3);
  REQUIRE(a.size() == b.size());
  REQUIRE(a.size() == 8);  // 120 records in batches of 16
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].at("label") == b[i].at("label"));
    CHECK(a[i].at("image") == b[i].at("image"));
  }
}

TEST_CASE("deterministic mode refuses stages it cannot order",
          "[input][topology]") {
  auto reg = make_registry(std::make_shared<observations>());
  auto r = load_topology_text(R"(runtime { deterministic: true }
stage { name: "src" type: "synthetic_source" replicas: 2 }
stage { name: "sink" type: "sink" input { stage: "src" } })",
                              "d.pbtxt", reg);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.errors.at(0).to_string(),
             Catch::Contains("d.pbtxt:2: stage 'src' (synthetic_source) has "
                             "several replicas"));
}

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

TEST_CASE("every reader restored from a snapshot continues exactly where it "
          "was",
          "[input]") {
  temp_dir dir;
  std::string csv = "id,v\n";
  for (int i = 0; i < 50; ++i)
    csv += std::to_string(i) + ",\"x\n" + std::to_string(i) + "\"\n";
  dir.write("a.csv", csv);
  dir.write("b.csv", csv);
  for (auto cls : {"a", "b"}) {
    std::filesystem::create_directories(dir.file(cls));
    for (int i = 0; i < 9; ++i)
      dir.write(std::string{cls} + "/" + std::to_string(i) + ".jpg",
                "file " + std::to_string(i));
  }
  registry reg = make_registry(std::make_shared<observations>());
  std::vector<std::pair<topology::Stage, std::string>> cases;
  topology::Stage c;
  c.set_type("csv_source");
  c.mutable_csv_source()->add_files(dir.path() + "/*.csv");
  c.mutable_csv_source()->set_records_per_item(7);
  c.mutable_csv_source()->set_epochs(2);
  auto* col = c.mutable_csv_source()->add_column();
  col->set_name("v");
  col->set_type("string");
  cases.emplace_back(c, "v");
  topology::Stage f;
  f.set_type("image_folder_source");
  f.mutable_image_folder_source()->set_dir(dir.path());
  f.mutable_image_folder_source()->set_records_per_item(4);
  f.mutable_image_folder_source()->set_epochs(2);
  cases.emplace_back(f, "image");
  for (auto& [s, field] : cases) {
    INFO(s.type());
    auto* type = reg.find(s.type());
    stage_info info{"r", s.type(), 0, 1, 0, nullptr};
    auto whole = type->make(info, s);
    collecting_emitter all;
    while (whole->produce(all)) {
    }
    for (int stop_at : {1, 5, 12}) {
      auto first = type->make(info, s);
      collecting_emitter part;
      for (int i = 0; i < stop_at; ++i)
        first->produce(part);
      auto second = type->make(info, s);
      second->restore(first->snapshot());
      while (second->produce(part)) {
      }
      REQUIRE(part.items.size() == all.items.size());
      for (size_t i = 0; i < all.items.size(); ++i)
        CHECK(part.items[i].at(field) == all.items[i].at(field));
    }
  }
}

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

TEST_CASE_METHOD(fixture, "stages that drop or replay items keep sequence "
                          "numbers usable for deterministic mode",
                 "[input]") {
  auto r = run_text(sys, reg, R"(
    runtime { deterministic: true }
    stage { name: "src" type: "synthetic_source"
            synthetic_source { records: 1000 records_per_item: 10 } }
    stage { name: "skip" type: "skip" input { stage: "src" }
            skip { count: 95 } }
    stage { name: "cache" type: "cache" input { stage: "skip" }
            cache { epochs: 2 } }
    stage { name: "map" type: "transform" replicas: 3
            input { stage: "cache" window: 2 } }
    stage { name: "batch" type: "batcher" input { stage: "map" }
            batcher { batch_size: 50 } }
    stage { name: "sink" type: "collect" input { stage: "batch" } })");
  REQUIRE(r.ok);
  int64_t records = 0;
  for (auto& b : obs->collected)
    records += b.records();
  CHECK(records == 2 * 905);
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
