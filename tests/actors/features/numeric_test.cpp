// numeric: log1p, standardize and bucketize values (a value on a boundary
// goes above it), chains applied in order, every numeric dtype and shape,
// log1p's domain error naming field and record, bad configs refused with
// what is wrong; and a CSV with empty cells through hash_bucket and
// numeric in one job.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "actorflow/actors/features/hash_bucket.hpp"
#include "tests/support/harness.hpp"
#include "tests/support/temp_dir.hpp"

using namespace af;
using namespace af::test;

namespace {

topology::NumericFeature* feature(topology::Stage& s, const std::string& input,
                                  std::vector<std::string> ops) {
  s.set_name("n");
  s.set_type("numeric");
  auto* f = s.mutable_numeric()->add_feature();
  f->set_input(input);
  for (auto& op : ops)
    f->add_op(op);
  return f;
}

template <class T>
tensor values(std::vector<T> v, tensor::shape_type shape, dtype t) {
  auto out = tensor::allocate(t, std::move(shape));
  std::copy(v.begin(), v.end(), out.template mutable_data_as<T>());
  return out;
}

template <class T>
std::vector<T> read(const tensor& t) {
  return {t.data_as<T>(), t.data_as<T>() + t.elements()};
}

batch run(const topology::Stage& s, batch in) {
  auto reg = make_registry(std::make_shared<observations>());
  REQUIRE(reg.find("numeric")->check(s).empty());
  collecting_emitter out;
  reg.find("numeric")->make(stage_info{}, s)->process(std::move(in), out);
  REQUIRE(out.items.size() == 1);
  return std::move(out.items[0]);
}

// What the loader says of a numeric stage: its schema's required fields
// (stage_type::config_required) first, then the type's check.
std::string problem(const topology::Stage& s) {
  auto reg = make_registry(std::make_shared<observations>());
  auto& type = *reg.find("numeric");
  auto missing = missing_config(s, type);
  return missing.empty() ? type.check(s) : missing;
}

} // namespace

TEST_CASE("numeric log1p, standardize and bucketize give the documented "
          "values",
          "[numeric][input]") {
  batch in;
  in.set("x", values<double>({0, 1, -0.5, 1e-10, std::exp(2.0) - 1}, {5},
                             dtype::f64));
  in.set("label", values<int64_t>({1, 2, 3, 4, 5}, {5}, dtype::i64));
  topology::Stage s;
  feature(s, "x", {"log1p"})->set_output("x_log");
  auto* st = feature(s, "x", {"standardize"});
  st->set_output("x_std");
  st->set_mean(0.5);
  st->set_std(2);
  auto* bk = feature(s, "x", {"bucketize"});
  bk->set_output("x_bucket");
  for (double b : {-0.5, 0.0, 1.0})
    bk->add_boundaries(b);
  auto b = run(s, std::move(in));
  auto& log = b.at("x_log");
  REQUIRE(log.type() == dtype::f32);
  CHECK(log.shape() == tensor::shape_type{5});
  auto l = read<float>(log);
  CHECK(l[0] == 0.0f);
  CHECK(l[1] == static_cast<float>(std::log(2.0)));
  CHECK(l[2] == static_cast<float>(std::log(0.5)));
  CHECK(l[3] == static_cast<float>(std::log1p(1e-10))); // not log(1 + x)
  CHECK(l[3] != 0.0f);
  CHECK(l[4] == 2.0f);
  CHECK(read<float>(b.at("x_std"))
        == std::vector<float>{-0.25f, 0.25f, -0.5f,
                              static_cast<float>((1e-10 - 0.5) / 2),
                              static_cast<float>((std::exp(2.0) - 1.5) / 2)});
  // Boundaries -0.5, 0, 1: a value equal to a boundary counts it, as
  // tf.raw_ops.Bucketize (x = -0.5 -> 1, 0 -> 2, 1 -> 3).
  auto& bucket = b.at("x_bucket");
  REQUIRE(bucket.type() == dtype::i64);
  CHECK(read<int64_t>(bucket) == std::vector<int64_t>{2, 3, 1, 2, 3});
  // The input and the other fields pass through untouched.
  CHECK(read<double>(b.at("x"))[2] == -0.5);
  CHECK(read<int64_t>(b.at("label")) == std::vector<int64_t>{1, 2, 3, 4, 5});
  CHECK(b.fields.size() == 5);
}

TEST_CASE("numeric bucketize sends values below, between, above and NaN "
          "to their buckets",
          "[numeric][input]") {
  topology::Stage s;
  auto* f = feature(s, "v", {"bucketize"});
  for (double x : {0.0, 10.0, 100.0})
    f->add_boundaries(x);
  batch in;
  auto nan = std::numeric_limits<float>::quiet_NaN();
  auto inf = std::numeric_limits<float>::infinity();
  in.set("v", values<float>({-inf, -1, 0, 5, 10, 99.5f, 100, 1e9f, inf, nan},
                            {10}, dtype::f32));
  auto b = run(s, std::move(in));
  CHECK(read<int64_t>(b.at("v"))
        == std::vector<int64_t>{0, 0, 1, 1, 2, 2, 3, 3, 3, 3});
}

TEST_CASE("numeric chains apply in order on every numeric dtype and keep "
          "the shape",
          "[numeric][input]") {
  // log1p then standardize: (ln(1 + x) - 1) / 0.5.
  topology::Stage s;
  auto* f = feature(s, "c", {"log1p", "standardize"});
  f->set_mean(1);
  f->set_std(0.5);
  auto expect = [](double x) {
    return static_cast<float>((std::log1p(x) - 1) / 0.5);
  };
  std::vector<float> want;
  for (double x : {0, 1, 2, 3, 250, 255})
    want.push_back(expect(x));
  auto check = [&](tensor t) {
    batch in;
    in.set("c", std::move(t));
    auto b = run(s, std::move(in));
    auto& out = b.at("c");
    CHECK(out.type() == dtype::f32);
    CHECK(out.shape() == tensor::shape_type{2, 3});
    CHECK(read<float>(out) == want);
  };
  check(values<float>({0, 1, 2, 3, 250, 255}, {2, 3}, dtype::f32));
  check(values<double>({0, 1, 2, 3, 250, 255}, {2, 3}, dtype::f64));
  check(values<int64_t>({0, 1, 2, 3, 250, 255}, {2, 3}, dtype::i64));
  check(values<int32_t>({0, 1, 2, 3, 250, 255}, {2, 3}, dtype::i32));
  check(values<uint8_t>({0, 1, 2, 3, 250, 255}, {2, 3}, dtype::u8));

  // The other order gives another answer: ln(1 + (x - 1) / 0.5).
  topology::Stage other;
  auto* g = feature(other, "c", {"standardize", "log1p"});
  g->set_mean(1);
  g->set_std(0.5);
  batch in;
  in.set("c", values<float>({1, 2}, {2}, dtype::f32));
  CHECK(read<float>(run(other, std::move(in)).at("c"))
        == std::vector<float>{0.0f, static_cast<float>(std::log(3.0))});

  // log1p, standardize, then bucketize: i64 ids.
  topology::Stage all;
  auto* h = feature(all, "c", {"log1p", "standardize", "bucketize"});
  h->set_mean(1);
  h->set_std(0.5);
  h->add_boundaries(0);
  h->add_boundaries((std::log1p(250.0) - 1) / 0.5); // 250 lands on it
  batch in2;
  in2.set("c", values<int64_t>({0, 3, 250, 255}, {4}, dtype::i64));
  auto ids = run(all, std::move(in2)).at("c");
  REQUIRE(ids.type() == dtype::i64);
  // -2, 0.77, on the boundary, above it.
  CHECK(read<int64_t>(ids) == std::vector<int64_t>{0, 1, 2, 2});
}

TEST_CASE("numeric log1p fails on values <= -1 naming the field and record",
          "[numeric][bad-input]") {
  topology::Stage s;
  feature(s, "x", {"log1p"});
  auto reg = make_registry(std::make_shared<observations>());
  auto logic = reg.find("numeric")->make(stage_info{}, s);
  collecting_emitter out;
  batch keyed;
  keyed.set("x", values<float>({0, 1, -2, 3}, {2, 2}, dtype::f32));
  keyed.set("key", tensor::strings({"a.csv:2", "a.csv:3"}));
  CHECK_THROWS_AS(logic->process(batch{keyed}, out), input_error);
  CHECK_THROWS_WITH(logic->process(batch{keyed}, out),
                    "numeric: field 'x' at a.csv:3: log1p of -2 (values "
                    "must be > -1)");
  batch plain;
  plain.seq = 7;
  plain.set("x", values<int64_t>({5, -1}, {2}, dtype::i64));
  CHECK_THROWS_WITH(logic->process(std::move(plain), out),
                    "numeric: field 'x' at record 1 of item 7: log1p of -1 "
                    "(values must be > -1)");
  batch text;
  text.set("x", tensor::strings({"1"}));
  CHECK_THROWS_WITH(logic->process(std::move(text), out),
                    "numeric: field 'x' is bytes[1], not numeric (f32, f64, "
                    "i64, i32 or u8)");
  batch missing;
  missing.set("y", values<float>({1}, {1}, dtype::f32));
  CHECK_THROWS_WITH(logic->process(std::move(missing), out),
                    "numeric: the item has no field 'x' (it has: y)");
  CHECK(out.items.empty());
}

TEST_CASE("numeric configs are refused with what is wrong",
          "[numeric][bad-input]") {
  auto one = [](std::vector<std::string> ops,
                const std::function<void(topology::NumericFeature&)>& set) {
    topology::Stage s;
    set(*feature(s, "x", std::move(ops)));
    return problem(s);
  };
  auto nothing = [](topology::NumericFeature&) {};
  CHECK(one({"log1p"}, nothing).empty());
  CHECK(one({}, nothing)
        == "numeric.feature[0].op is required (numeric { feature { input: "
           "\"...\" op: \"...\" } })");
  CHECK(one({"log1p", "log"}, nothing)
        == "numeric.feature[0] ('x'): unknown op 'log' (known: log1p, "
           "standardize, bucketize)");
  CHECK(one({"standardize"}, nothing)
        == "numeric.feature[0] ('x'): standardize needs std (> 0)");
  CHECK(one({"standardize"}, [](auto& f) { f.set_std(0); })
        == "numeric.feature[0] ('x'): std must be > 0 and finite, got 0");
  CHECK(one({"standardize"}, [](auto& f) { f.set_std(-1.5); })
        == "numeric.feature[0] ('x'): std must be > 0 and finite, got -1.5");
  CHECK(one({"log1p"}, [](auto& f) { f.set_mean(3); })
        == "numeric.feature[0] ('x'): mean and std are for standardize, "
           "which op does not list");
  CHECK(one({"bucketize"}, nothing)
        == "numeric.feature[0] ('x'): bucketize needs boundaries (strictly "
           "increasing)");
  CHECK(one({"bucketize"},
            [](auto& f) {
              f.add_boundaries(1);
              f.add_boundaries(3);
              f.add_boundaries(2);
            })
        == "numeric.feature[0] ('x'): boundaries must be strictly "
           "increasing: boundaries[2] = 2 after 3");
  CHECK(one({"bucketize"},
            [](auto& f) {
              f.add_boundaries(1);
              f.add_boundaries(1);
            })
        == "numeric.feature[0] ('x'): boundaries must be strictly "
           "increasing: boundaries[1] = 1 after 1");
  CHECK(one({"log1p"}, [](auto& f) { f.add_boundaries(1); })
        == "numeric.feature[0] ('x'): boundaries are for bucketize, which op "
           "does not list");
  CHECK(one({"bucketize", "log1p"}, [](auto& f) { f.add_boundaries(1); })
        == "numeric.feature[0] ('x'): bucketize must be the last op (it "
           "gives bucket indices, i64)");

  topology::Stage empty;
  empty.set_type("numeric");
  empty.mutable_numeric();
  CHECK(problem(empty)
        == "numeric.feature is required (numeric { feature { input: \"...\" "
           "op: \"...\" } })");
  topology::Stage twice;
  feature(twice, "a", {"log1p"})->set_output("y");
  feature(twice, "b", {"log1p"})->set_output("y");
  CHECK(problem(twice)
        == "numeric.feature[1]: output 'y' is also feature[0]'s (outputs "
           "must differ)");
  topology::Stage no_input;
  feature(no_input, "a", {"log1p"});
  feature(no_input, "", {"log1p"});
  CHECK(problem(no_input)
        == "numeric.feature[1].input is required (numeric { feature { input: "
           "\"...\" op: \"...\" } })");
}

TEST_CASE_METHOD(fixture, "a CSV with empty cells becomes ids and "
                          "standardized floats in one job",
                 "[numeric][hash_bucket][csv][input]") {
  temp_dir dir;
  dir.write("t.csv", "count,cat,label\n"
                     "0,red,1\n"
                     ",blue,0\n" // count: the default 0
                     "9,,1\n"    // cat: the default "none"
                     "3,red,0\n");
  auto r = run_text(sys, reg, R"(
    stage { name: "read" type: "csv_source"
            csv_source { files: ")" + dir.file("t.csv") + R"("
                         column { name: "count" type: "float"
                                  default_value: "0" }
                         column { name: "cat" type: "string"
                                  default_value: "none" }
                         column { name: "label" type: "int64" } } }
    stage { name: "features" type: "hash_bucket" input { stage: "read" }
            hash_bucket { buckets: 100 feature { input: "cat" } } }
    stage { name: "numbers" type: "numeric" input { stage: "features" }
            numeric { feature { input: "count" op: ["log1p", "standardize"]
                                mean: 1 std: 0.5 }
                      feature { input: "count" output: "count_bucket"
                                op: "bucketize" boundaries: [1, 5] } } }
    stage { name: "sink" type: "collect" input { stage: "numbers" } })");
  REQUIRE(r.ok);
  REQUIRE(obs->collected.size() == 1);
  auto& b = obs->collected[0];
  std::vector<int64_t> cats;
  for (auto c : {"red", "blue", "none", "red"})
    cats.push_back(hash_bucket_id(c, 100));
  CHECK(read<int64_t>(b.at("cat")) == cats);
  std::vector<float> counts;
  for (double c : {0, 0, 9, 3})
    counts.push_back(static_cast<float>((std::log1p(c) - 1) / 0.5));
  CHECK(read<float>(b.at("count")) == counts);
  CHECK(read<int64_t>(b.at("count_bucket"))
        == std::vector<int64_t>{0, 0, 2, 1});
  CHECK(read<int64_t>(b.at("label")) == std::vector<int64_t>{1, 0, 1, 0});
}
