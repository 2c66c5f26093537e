// record_id_log: the trainers' and sinks' list of the records they consumed
// (TrainerConfig.record_ids): whole steps in the file, the checkpoint's cut
// on resume, and clear errors.
#include <catch2/catch.hpp>

#include <fstream>

#include "actorflow/actors/sinks/record_id_log.hpp"
#include "actorflow/runtime/stage/stage.hpp"
#include "tests/support/temp_dir.hpp"

using namespace af;
using namespace af::test;

namespace {

batch with_ids(std::vector<int64_t> ids) {
  batch b;
  auto t = tensor::allocate(dtype::i64, {static_cast<int64_t>(ids.size())});
  std::copy(ids.begin(), ids.end(), t.mutable_data_as<int64_t>());
  b.set("index", std::move(t));
  return b;
}

} // namespace

TEST_CASE("record ids: one line per record, STEP EPOCH ID, whole steps",
          "[record_ids]") {
  temp_dir dir;
  auto path = dir.write("ids-1.txt", "stale lines of an earlier run\n");
  record_id_log log(dir.file("ids-{replica}.txt"), "index", 1, "train[1]");
  CHECK(log.path() == path);
  std::vector<int64_t> ids;
  log.take(with_ids({7, (int64_t{3} << 32) | 5}), ids);
  log.write(1, 0, ids);
  log.take(with_ids({9}), ids);
  log.write(2, 1, ids);
  log.close();
  CHECK(temp_dir::read(path) == "1 0 7\n1 0 12884901893\n2 1 9\n");
}

TEST_CASE("record ids: a resumed consumer keeps the steps up to the "
          "checkpoint's and cuts the rest, a partial line included",
          "[record_ids]") {
  temp_dir dir;
  // Steps 1-3 listed, then a kill in the middle of step 4's write.
  auto path = dir.write("ids.txt", "1 0 10\n1 0 11\n2 0 12\n3 0 13\n4 0 1");
  record_id_log log(path, "index", 0, "train[0]");
  log.restore(2);
  CHECK(temp_dir::read(path) == "1 0 10\n1 0 11\n2 0 12\n");
  log.write(3, 0, {13});
  log.close();
  CHECK(temp_dir::read(path) == "1 0 10\n1 0 11\n2 0 12\n3 0 13\n");

  SECTION("restored at step 0: nothing was in the checkpoint") {
    record_id_log again(path, "index", 0, "train[0]");
    again.restore(0);
    again.close();
    CHECK(temp_dir::read(path).empty());
  }
  SECTION("a missing file is created") {
    record_id_log other(dir.file("none.txt"), "index", 0, "train[0]");
    other.restore(5);
    other.write(6, 0, {1});
    other.close();
    CHECK(temp_dir::read(dir.file("none.txt")) == "6 0 1\n");
  }
}

TEST_CASE("record ids: a batch without the field, or with the wrong one, "
          "fails naming it", "[record_ids]") {
  temp_dir dir;
  record_id_log log(dir.file("ids.txt"), "id", 0, "sink[0]");
  std::vector<int64_t> ids;
  CHECK_THROWS_WITH(log.take(with_ids({1}), ids),
                    Catch::Contains("the batch has no field 'id'"));
  batch b = with_ids({1, 2});
  b.set("id", tensor::allocate(dtype::f32, {2}));
  CHECK_THROWS_AS(log.take(b, ids), input_error);
  auto i32 = tensor::allocate(dtype::i32, {2});
  i32.mutable_data_as<int32_t>()[0] = 4;
  i32.mutable_data_as<int32_t>()[1] = 5;
  b.set("id", i32);
  log.take(b, ids);
  CHECK(ids == std::vector<int64_t>{4, 5});
}

TEST_CASE("record ids: several replicas need {replica} in the path",
          "[record_ids]") {
  CHECK(record_id_log::check("/tmp/ids.txt", 1).empty());
  CHECK(record_id_log::check("/tmp/ids-{replica}.txt", 4).empty());
  CHECK_THAT(record_id_log::check("/tmp/ids.txt", 2),
             Catch::Contains("needs \"{replica}\""));
}
