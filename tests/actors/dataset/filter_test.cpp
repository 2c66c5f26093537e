// filter: its clause grammar (what parses, and what each mistake says), and
// the stage keeping exactly the records every clause holds for.
#include <catch2/catch.hpp>

#include <limits>
#include <set>
#include <string>
#include <vector>

#include "actorflow/actors/dataset/filter.hpp"
#include "actorflow/proto/example.pb.h"
#include "actorflow/runtime/formats/tfrecord_writer.hpp"
#include "actorflow/runtime/topology/topology.hpp"
#include "tests/support/harness.hpp"
#include "tests/support/temp_dir.hpp"

using namespace af;
using namespace af::test;

namespace {

const char* names[] = {"cat", "dog", "bird"};

// 40 records: label i, weight i / 4, name names[i % 3].
void write_records(const temp_dir& dir) {
  tfrecord_writer w;
  REQUIRE(w.open(dir.file("data.tfrecord")));
  for (int i = 0; i < 40; ++i) {
    tf::Example ex;
    auto& f = *ex.mutable_features()->mutable_feature();
    f["label"].mutable_int64_list()->add_value(i);
    f["weight"].mutable_float_list()->add_value(static_cast<float>(i) / 4);
    f["name"].mutable_bytes_list()->add_value(names[i % 3]);
    REQUIRE(w.write(ex.SerializeAsString()));
  }
  REQUIRE(w.close());
}

std::string job(const temp_dir& dir, const std::vector<std::string>& where) {
  std::string clauses;
  for (auto& w : where) {
    std::string quoted;
    for (char c : w)
      quoted += c == '"' ? std::string{"\\\""} : std::string{c};
    clauses += " where: \"" + quoted + "\"";
  }
  return R"(
    stage { name: "read" type: "tfrecord_source"
            tfrecord_source { files: ")"
         + dir.file("data.tfrecord") + R"(" records_per_item: 8 } }
    stage { name: "parse" type: "example_parse" input { stage: "read" }
            example_parse { feature { name: "label" type: "int64" }
                            feature { name: "weight" type: "float" }
                            feature { name: "name" type: "bytes" } } }
    stage { name: "keep" type: "filter" input { stage: "parse" }
            filter {)" + clauses + R"( } }
    stage { name: "sink" type: "collect" input { stage: "keep" } })";
}

std::set<int64_t> labels(const std::vector<batch>& items) {
  std::set<int64_t> out;
  for (auto& b : items)
    for (int64_t i = 0; i < b.records(); ++i) {
      auto label = b.at("label").data_as<int64_t>()[i];
      CHECK(b.at("name").string_at(i) == names[label % 3]); // rows stay whole
      CHECK(b.at("weight").data_as<float>()[i] == static_cast<float>(label) / 4);
      out.insert(label);
    }
  return out;
}

// The labels 0..39 for which `keep` holds.
template <class F>
std::set<int64_t> expected(F keep) {
  std::set<int64_t> out;
  for (int64_t i = 0; i < 40; ++i)
    if (keep(i))
      out.insert(i);
  return out;
}

} // namespace

TEST_CASE("filter clauses parse, and a wrong one says where", "[filter]") {
  filter_clause c;
  CHECK(parse_filter_clause("label in {1, 3, -5}", c).empty());
  CHECK(c.k == filter_clause::kind::in_set);
  REQUIRE(c.set.size() == 3);
  CHECK(c.set[2].integer == -5);
  CHECK(parse_filter_clause("label not in {0}", c).empty());
  CHECK(c.k == filter_clause::kind::not_in_set);
  CHECK(parse_filter_clause("score >= 0.5", c).empty());
  CHECK((c.cmp == filter_clause::op::ge && !c.lo.is_integer
         && c.lo.number == 0.5));
  CHECK(parse_filter_clause("0 <= x < 1e3", c).empty());
  CHECK((c.k == filter_clause::kind::range && c.lo_inclusive
         && !c.hi_inclusive && c.hi.number == 1000));
  CHECK(parse_filter_clause("name == \"say \\\"hi\\\"\"", c).empty());
  CHECK(c.lo.text == "say \"hi\"");
  CHECK(parse_filter_clause("index != 7", c).empty()); // "in" starts it
  CHECK(c.field == "index");

  CHECK(parse_filter_clause("", c) == "an empty clause");
  CHECK(parse_filter_clause("label ~ 3", c)
        == "column 7: expected ==, !=, <, <=, >, >=, in or not in");
  CHECK(parse_filter_clause("label in 1, 2", c)
        == "column 10: expected '{' to start the set");
  CHECK(parse_filter_clause("label in {1 2}", c)
        == "column 13: expected ',' or '}'");
  CHECK(parse_filter_clause("label == cat", c)
        == "column 10: expected a number or a \"quoted string\"");
  CHECK(parse_filter_clause("name == \"cat", c)
        == "column 9: a string without its closing quote");
  CHECK(parse_filter_clause("label == 1 2", c)
        == "column 12: unexpected text after the clause");
  CHECK(parse_filter_clause("label not {1}", c)
        == "column 11: expected 'in' after 'not'");
  CHECK(parse_filter_clause("1 < x > 3", c)
        == "column 7: a range needs < or <= before its upper bound");
  CHECK(parse_filter_clause("\"a\" < x < \"b\"", c)
        == "a range needs numbers, not strings");
  // Decimal numbers only (strtod would take these).
  for (auto bad : {"x == nan", "x == inf", "x == 0x10", "x == 1e999"}) {
    INFO(bad);
    CHECK(parse_filter_clause(bad, c)
          == "column 6: expected a number or a \"quoted string\"");
  }
  CHECK(parse_filter_clause("x > 1e-310", c).empty()); // tiny, not an error
}

TEST_CASE_METHOD(fixture, "filter keeps exactly the records every clause "
                          "holds for",
                 "[filter][input]") {
  temp_dir dir;
  write_records(dir);
  struct want {
    std::vector<std::string> where;
    std::set<int64_t> labels;
  };
  std::vector<want> cases{
    {{"label in {3, 5, 39, 77}"},
     expected([](int64_t i) { return i == 3 || i == 5 || i == 39; })},
    {{"label not in {0, 1}"}, expected([](int64_t i) { return i > 1; })},
    {{"2.5 <= weight < 5"},
     expected([](int64_t i) { return i >= 10 && i < 20; })},
    {{"label > 30", "name != \"dog\""},
     expected([](int64_t i) { return i > 30 && i % 3 != 1; })},
    {{"name == \"bird\""}, expected([](int64_t i) { return i % 3 == 2; })},
    {{"label < 0"}, {}},
  };
  for (auto& c : cases) {
    INFO(c.where.front());
    obs->collected.clear();
    auto r = run_text(sys, reg, job(dir, c.where));
    REQUIRE(r.ok);
    CHECK(labels(obs->collected) == c.labels);
    // One item out per item in (5 of 8 records), emptied ones too.
    CHECK(obs->collected.size() == 5);
  }
}

TEST_CASE_METHOD(fixture, "filter refuses a clause its field cannot answer",
                 "[filter][bad-input]") {
  temp_dir dir;
  write_records(dir);
  auto fails = [&](const std::string& where, const std::string& why) {
    INFO(where);
    auto r = run_text(sys, reg, job(dir, {where}));
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.error, Catch::Contains(why));
  };
  fails("size > 3", "filter: the items have no field 'size'");
  fails("name == 3",
        "field 'name' holds bytes; compare it with \"quoted strings\"");
  fails("label == \"3\"",
        "field 'label' holds i64 numbers; compare it with numbers");
  fails("name < \"z\"", "field 'name' holds bytes: only == and != compare");
  // Caught by the topology check, before the job starts.
  auto loaded = load_topology_text(job(dir, {"label =="}), "f.pbtxt", reg);
  REQUIRE_FALSE(loaded.ok());
  REQUIRE(loaded.errors.size() == 1);
  CHECK(loaded.errors[0].to_string()
        == "f.pbtxt:8: stage 'keep' (filter): filter.where \"label ==\": "
           "column 9: expected a number or a \"quoted string\"");
}

TEST_CASE_METHOD(fixture, "a NaN value passes only != and not in",
                 "[filter][input]") {
  temp_dir dir;
  tfrecord_writer w;
  REQUIRE(w.open(dir.file("data.tfrecord")));
  for (int i = 0; i < 4; ++i) {
    tf::Example ex;
    auto& f = *ex.mutable_features()->mutable_feature();
    f["label"].mutable_int64_list()->add_value(i);
    f["weight"].mutable_float_list()->add_value(
      i == 2 ? std::numeric_limits<float>::quiet_NaN()
             : static_cast<float>(i));
    f["name"].mutable_bytes_list()->add_value(names[i % 3]);
    REQUIRE(w.write(ex.SerializeAsString()));
  }
  REQUIRE(w.close());
  auto kept = [&](const std::string& where) {
    obs->collected.clear();
    auto r = run_text(sys, reg, job(dir, {where}));
    REQUIRE(r.ok);
    std::set<int64_t> out;
    for (auto& b : obs->collected)
      for (int64_t i = 0; i < b.records(); ++i)
        out.insert(b.at("label").data_as<int64_t>()[i]);
    return out;
  };
  CHECK(kept("weight != 1") == std::set<int64_t>{0, 2, 3});
  CHECK(kept("weight not in {0}") == std::set<int64_t>{1, 2, 3});
  CHECK(kept("weight >= 0") == std::set<int64_t>{0, 1, 3});
  CHECK(kept("weight <= 5") == std::set<int64_t>{0, 1, 3});
  CHECK(kept("0 <= weight <= 5") == std::set<int64_t>{0, 1, 3});
  CHECK(kept("weight in {0, 1, 3}") == std::set<int64_t>{0, 1, 3});
}
