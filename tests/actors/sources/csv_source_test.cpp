// csv_source's default_value: an empty cell of such a column reads as the
// default (int64, float and string), a column without one keeps the old
// behaviour (a bad row for numbers, "" for strings), and a default that
// does not parse as its column's type is refused when the topology loads.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <google/protobuf/text_format.h>

#include "actorflow/actors/features/image_decode.hpp"
#include "actorflow/gpu/jpeg_decoder.hpp"
#include "actorflow/proto/example.pb.h"
#include "actorflow/runtime/formats/csv_reader.hpp"
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

std::string csv_job(const std::string& file, const std::string& columns,
                    const std::string& extra = "") {
  return R"(
    stage { name: "csv" type: "csv_source"
            csv_source { files: ")" + file + "\" " + extra + columns + R"( } }
    stage { name: "sink" type: "collect" input { stage: "csv" } })";
}

} // namespace

TEST_CASE_METHOD(fixture, "csv_source fills empty cells with the column's "
                          "default_value",
                 "[csv][input]") {
  temp_dir dir;
  // Row 3 has every cell empty, a quoted "" too; row 4 a cell of spaces
  // (libcsv drops the spaces around an unquoted cell: empty too).
  dir.write("d.csv", "i,f,s,t\n"
                     "1,0.5,x,y\n"
                     ",,\"\",\n"
                     "3,  ,z,w\n");
  auto columns = R"(
    column { name: "i" type: "int64" default_value: "-7" }
    column { name: "f" type: "float" default_value: "2.5" }
    column { name: "s" type: "string" default_value: "none" }
    column { name: "t" type: "string" })";
  auto r = run_text(sys, reg, csv_job(dir.file("d.csv"), columns));
  REQUIRE(r.ok);
  REQUIRE(obs->collected.size() == 1);
  auto& b = obs->collected[0];
  REQUIRE(b.records() == 3);
  CHECK(b.at("i").data_as<int64_t>()[0] == 1);
  CHECK(b.at("i").data_as<int64_t>()[1] == -7);
  CHECK(b.at("i").data_as<int64_t>()[2] == 3);
  CHECK(b.at("f").data_as<float>()[0] == 0.5f);
  CHECK(b.at("f").data_as<float>()[1] == 2.5f);
  CHECK(b.at("f").data_as<float>()[2] == 2.5f);
  CHECK(b.at("s").string_at(0) == "x");
  CHECK(b.at("s").string_at(1) == "none");
  CHECK(b.at("s").string_at(2) == "z");
  CHECK(b.at("t").string_at(0) == "y");
  CHECK(b.at("t").string_at(1) == ""); // no default: stays empty
}

TEST_CASE_METHOD(fixture, "csv_source without default_value keeps an empty "
                          "number a bad row",
                 "[csv][input]") {
  temp_dir dir;
  dir.write("e.csv", "i,s\n1,a\n,b\n3,\n");
  auto columns = R"(
    column { name: "i" type: "int64" }
    column { name: "s" type: "string" })";
  auto r = run_text(sys, reg, csv_job(dir.file("e.csv"), columns));
  REQUIRE_FALSE(r.ok);
  CHECK_THAT(r.error, Catch::Contains("e.csv:3: column 'i': '' is not an "
                                      "int64"));
  obs->collected.clear();
  auto skipped = run_text(sys, reg, csv_job(dir.file("e.csv"), columns,
                                            "on_bad_row: \"skip\" "));
  REQUIRE(skipped.ok);
  auto& b = obs->collected.at(0);
  REQUIRE(b.records() == 2);
  CHECK(b.at("i").data_as<int64_t>()[1] == 3);
  CHECK(b.at("s").string_at(1) == "");
}

TEST_CASE("csv_source refuses a default_value that does not parse, naming "
          "the column",
          "[csv][bad-input]") {
  temp_dir dir;
  auto file = dir.write("x.csv", "a\n1\n");
  auto reg = make_registry(std::make_shared<observations>());
  auto problem = [&](const std::string& column) {
    auto loaded = load_topology_text(csv_job(file, column), "t.pbtxt", reg);
    std::string all;
    for (auto& e : loaded.errors)
      all += e.to_string() + "\n";
    return all;
  };
  auto column = [](const std::string& type, const std::string& value) {
    return R"(column { name: "a" type: ")" + type + R"(" default_value: ")"
           + value + R"(" })";
  };
  CHECK_THAT(problem(column("int64", "1.5")),
             Catch::Contains("csv_source column 'a': default_value '1.5' is "
                             "not an int64"));
  CHECK_THAT(problem(column("int64", "")),
             Catch::Contains("csv_source column 'a': default_value '' is not "
                             "an int64"));
  CHECK_THAT(problem(column("float", "n/a")),
             Catch::Contains("csv_source column 'a': default_value 'n/a' is "
                             "not a float"));
  CHECK(problem(column("float", "-1e3")).empty());
  CHECK(problem(column("string", "")).empty());
}

// One reading of numbers for csv_source and `actorflow convert csv` (they
// once differed: convert took "+5" as an int64, csv_source did not).
TEST_CASE("a CSV cell reads as a number the same way everywhere",
          "[csv][input]") {
  int64_t i = 0;
  CHECK(parse_csv_int64("-12", i));
  CHECK(i == -12);
  CHECK(parse_csv_int64("+5", i));
  CHECK(i == 5);
  CHECK(parse_csv_int64("9223372036854775807", i));
  CHECK(i == INT64_MAX);
  CHECK_FALSE(parse_csv_int64("9223372036854775808", i)); // beyond 64 bits
  CHECK_FALSE(parse_csv_int64("", i));
  CHECK_FALSE(parse_csv_int64("+", i));
  CHECK_FALSE(parse_csv_int64("1.5", i));
  CHECK_FALSE(parse_csv_int64("12 ", i));
  CHECK_FALSE(parse_csv_int64("0x10", i));
  float f = 0;
  CHECK(parse_csv_float("+2.5", f));
  CHECK(f == 2.5f);
  CHECK(parse_csv_float("-1e3", f));
  CHECK(f == -1000.0f);
  CHECK(parse_csv_float("1e-40", f)); // below normal floats: rounded
  CHECK(f > 0.0f);
  CHECK(f < 1e-37f);
  CHECK(parse_csv_float("1e-50", f)); // rounds to 0
  CHECK(f == 0.0f);
  CHECK_FALSE(parse_csv_float("1e39", f)); // beyond float
  CHECK_FALSE(parse_csv_float("", f));
  CHECK_FALSE(parse_csv_float("2.5x", f));
  CHECK_FALSE(parse_csv_float("-", f));
}

TEST_CASE_METHOD(fixture, "csv_source reads signed and tiny numbers, and "
                          "refuses one beyond float naming its line",
                 "[csv][input]") {
  temp_dir dir;
  dir.write("n.csv", "i,f\n+5,1e-40\n-3,+0.25\n");
  auto columns = R"(
    column { name: "i" type: "int64" }
    column { name: "f" type: "float" })";
  auto r = run_text(sys, reg, csv_job(dir.file("n.csv"), columns));
  REQUIRE(r.ok);
  auto& b = obs->collected.at(0);
  REQUIRE(b.records() == 2);
  CHECK(b.at("i").data_as<int64_t>()[0] == 5);
  CHECK(b.at("i").data_as<int64_t>()[1] == -3);
  CHECK(b.at("f").data_as<float>()[0] > 0.0f);
  CHECK(b.at("f").data_as<float>()[1] == 0.25f);
  obs->collected.clear();
  dir.write("big.csv", "i,f\n1,2\n2,3e40\n");
  auto bad = run_text(sys, reg, csv_job(dir.file("big.csv"), columns));
  REQUIRE_FALSE(bad.ok);
  CHECK_THAT(bad.error, Catch::Contains("big.csv:3: column 'f': '3e40' is "
                                        "not a float"));
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
