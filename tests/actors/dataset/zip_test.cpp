// zip: the i-th record of each input paired, per epoch, in order (checked
// by identity); the longer input's extra records dropped at each epoch's
// end; prefixes, name clashes and inputs with several replicas refused by
// name; a snapshot resumes to the same records.
#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

#include "tests/support/harness.hpp"
#include "tests/support/numbered.hpp"
#include "tests/support/temp_dir.hpp"

using namespace af;
using namespace af::test;

namespace {

std::string name_of(int64_t id) { return numbered("n", id); }

// a.csv: label 0..29; b.csv: id 100..119 with name "n<id>".
void write_inputs(const temp_dir& dir) {
  std::string a = "label\n", b = "id,name\n";
  for (int i = 0; i < 30; ++i)
    a += std::to_string(i) + "\n";
  for (int i = 100; i < 120; ++i)
    b += std::to_string(i) + "," + name_of(i) + "\n";
  dir.write("a.csv", a);
  dir.write("b.csv", b);
}

std::string job(const temp_dir& dir, const std::string& zip,
                const std::string& b_column = "id",
                const std::string& b_file = "b.csv") {
  return R"(
    stage { name: "a" type: "csv_source"
            csv_source { files: ")" + dir.file("a.csv") + R"("
                         column { name: "label" type: "int64" }
                         records_per_item: 7 epochs: 2 } }
    stage { name: "b" type: "csv_source"
            csv_source { files: ")" + dir.file(b_file) + R"("
                         column { name: ")" + b_column + R"(" type: "int64" }
                         column { name: "name" type: "string" }
                         records_per_item: 4 epochs: 2 } }
    stage { name: "zip" type: "zip" input { stage: "a" } input { stage: "b" }
            )" + zip + R"( }
    stage { name: "sink" type: "collect" input { stage: "zip" } })";
}

} // namespace

TEST_CASE_METHOD(fixture, "zip pairs the i-th records of its inputs, epoch "
                          "by epoch, up to the shorter",
                 "[zip][input]") {
  temp_dir dir;
  write_inputs(dir);
  auto r = run_text(sys, reg, job(dir, R"(zip { prefix: ["a_", "b_"] })"));
  REQUIRE(r.ok);
  std::vector<std::pair<uint64_t, std::pair<int64_t, int64_t>>> got, want;
  for (auto& b : obs->collected) {
    for (auto& name : {"a_label", "a_key", "a_index", "b_id", "b_name",
                       "b_key", "b_index"})
      CHECK(b.find(name) != nullptr);
    for (int64_t i = 0; i < b.records(); ++i) {
      auto id = b.at("b_id").data_as<int64_t>()[i];
      CHECK(b.at("b_name").string_at(i) == name_of(id));
      got.push_back({b.epoch, {b.at("a_label").data_as<int64_t>()[i], id}});
    }
  }
  for (uint64_t e = 0; e < 2; ++e)
    for (int64_t i = 0; i < 20; ++i)
      want.push_back({e, {i, 100 + i}});
  CHECK(got == want); // a's records 20..29 have no partner
}

TEST_CASE_METHOD(fixture, "zip without prefixes keeps the first input's key "
                          "and index, and refuses other clashes by name",
                 "[zip][bad-input]") {
  temp_dir dir;
  write_inputs(dir);
  auto r = run_text(sys, reg, job(dir, "zip { }"));
  REQUIRE(r.ok);
  REQUIRE_FALSE(obs->collected.empty());
  auto& first = obs->collected.front();
  CHECK(first.fields.size() == 5); // label key index id name
  CHECK(first.at("key").string_at(0).find("a.csv") != std::string::npos);
  dir.write("bl.csv", "label,name\n1,x\n");
  auto clash = run_text(sys, reg, job(dir, "zip { }", "label", "bl.csv"));
  CHECK_FALSE(clash.ok);
  CHECK_THAT(clash.error, Catch::Contains("zip: field 'label' comes from 'b' "
                                          "and an input before it"));
}

TEST_CASE_METHOD(fixture, "zip refuses an input with several replicas, and "
                          "configurations it cannot run",
                 "[zip][bad-input]") {
  temp_dir dir;
  write_inputs(dir);
  dir.write("a2.csv", "label\n7\n");
  auto text = job(dir, "zip { }");
  auto at = text.find(R"(name: "a" type: "csv_source")");
  text.replace(at, std::string{R"(name: "a" type: "csv_source")"}.size(),
               R"(name: "a" type: "csv_source" replicas: 2)");
  text.replace(text.find(dir.file("a.csv")), dir.file("a.csv").size(),
               dir.path() + "/a*.csv");
  auto r = run_text(sys, reg, text);
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.error, Catch::Contains("zip: input 'a' has several replicas"));

  auto problem = [&](const std::string& t) {
    auto loaded = load_topology_text(t, "t.pbtxt", reg);
    std::string all;
    for (auto& e : loaded.errors)
      all += e.to_string() + "\n";
    return all;
  };
  CHECK_THAT(problem(job(dir, R"(zip { prefix: ["x_"] })")),
             Catch::Contains("1 prefixes for 2 inputs"));
  auto one = job(dir, "zip { }");
  one.replace(one.find(R"(input { stage: "b" })"), 20, "");
  CHECK_THAT(problem(one), Catch::Contains("zip needs two or more inputs"));
}

TEST_CASE("zip resumes from a snapshot to the same records",
          "[zip][input]") {
  auto reg = make_registry(std::make_shared<observations>());
  topology::Stage s;
  s.set_name("zip");
  s.set_type("zip");
  s.add_input()->set_stage("a");
  s.add_input()->set_stage("b");
  s.mutable_zip()->add_prefix("a_");
  s.mutable_zip()->add_prefix("b_");
  auto item = [](int64_t from, int64_t n, uint64_t epoch) {
    batch b;
    auto x = tensor::allocate(dtype::i64, {n});
    for (int64_t i = 0; i < n; ++i)
      x.mutable_data_as<int64_t>()[i] = from + i;
    b.set("x", std::move(x));
    b.epoch = epoch;
    return b;
  };
  // a: items of 3, b: items of 5, over two epochs of 12 (a) and 10 (b).
  struct step {
    const char* from;
    int64_t first, n;
    uint64_t epoch;
  };
  std::vector<step> steps;
  for (uint64_t e = 0; e < 2; ++e) {
    for (int64_t i = 0; i < 12; i += 3)
      steps.push_back({"a[0]", 100 * static_cast<int64_t>(e) + i, 3, e});
    for (int64_t i = 0; i < 10; i += 5)
      steps.push_back({"b[0]", 1000 + 100 * static_cast<int64_t>(e) + i, 5, e});
  }
  auto run = [&](stage_logic& z, size_t from, size_t to, collecting_emitter& out) {
    for (auto i = from; i < to; ++i) {
      auto& st = steps[i];
      z.process_from(st.from, item(st.first, st.n, st.epoch), out);
      if (i == 5) // both inputs sent epoch 0
        z.end_of_epoch(0, out);
    }
  };
  auto whole = reg.find("zip")->make(stage_info{"zip", "zip", 0, 1, 0, nullptr}, s);
  collecting_emitter all, part;
  run(*whole, 0, steps.size(), all);
  whole->end_of_epoch(1, all);
  for (size_t cut : {1u, 3u, 5u, 7u, 9u}) {
    INFO("cut after step " << cut);
    auto first = reg.find("zip")->make(stage_info{"zip", "zip", 0, 1, 0, nullptr}, s);
    auto second = reg.find("zip")->make(stage_info{"zip", "zip", 0, 1, 0, nullptr}, s);
    collecting_emitter out;
    run(*first, 0, cut, out);
    second->restore(first->snapshot());
    // run() ends epoch 0 after step 5: past it, the resumed one must too.
    run(*second, cut, steps.size(), out);
    second->end_of_epoch(1, out);
    std::vector<std::pair<int64_t, int64_t>> a, b;
    for (auto& x : out.items)
      for (int64_t i = 0; i < x.records(); ++i)
        a.push_back({x.at("a_x").data_as<int64_t>()[i],
                     x.at("b_x").data_as<int64_t>()[i]});
    for (auto& x : all.items)
      for (int64_t i = 0; i < x.records(); ++i)
        b.push_back({x.at("a_x").data_as<int64_t>()[i],
                     x.at("b_x").data_as<int64_t>()[i]});
    CHECK(a == b);
  }
  // Epoch by epoch, up to b's 10.
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (auto& x : all.items)
    for (int64_t i = 0; i < x.records(); ++i)
      pairs.push_back({x.at("a_x").data_as<int64_t>()[i],
                       x.at("b_x").data_as<int64_t>()[i]});
  std::vector<std::pair<int64_t, int64_t>> want;
  for (int64_t e = 0; e < 2; ++e)
    for (int64_t i = 0; i < 10; ++i)
      want.push_back({100 * e + i, 1000 + 100 * e + i});
  CHECK(pairs == want);
}
