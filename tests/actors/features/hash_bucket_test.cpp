// hash_bucket: ids are XXH64(bytes, seed 0) mod buckets (checked against
// the C library and against ids computed elsewhere), or with hash:
// "fingerprint64" TensorFlow's ids (checked against ids TensorFlow computed;
// tests/interop/tf_interop.py --case hash_bucket checks 20,000 strings
// against TensorFlow itself), stay in [0, buckets), replace or add fields,
// and refuse a field that is not one string per record or is missing, and
// configs without buckets or with an unknown hash.
#include <catch2/catch.hpp>

#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <xxhash.h>

#include "actorflow/actors/features/hash_bucket.hpp"
#include "tests/support/harness.hpp"

using namespace af;
using namespace af::test;

namespace {

// Strings with known ids: the empty string, short ones, UTF-8, a NUL byte,
// and one past XXH64's 32-byte stripe.
const std::vector<std::string> known = {
  "",
  "a",
  "abc",
  "hello world",
  "caf\xc3\xa9",
  std::string{"\x00\xff", 2},
  "The quick brown fox jumps over the lazy dog",
};

// XXH64(s, seed 0) of `known` and those mod 1000 and mod 7, computed with
// the Python package xxhash 3.4 from PyPI (its own copy of xxHash 0.8.4,
// not Debian's libxxhash 0.8.1 that the stage links):
//   [xxhash.xxh64_intdigest(s) for s in strings]
const std::vector<uint64_t> known_xxh64 = {
  17241709254077376921ull, 15154266338359012955ull, 4952883123889572249ull,
  5020219685658847592ull,  11115070494344764010ull, 16202119234872089981ull,
  802816344064684476ull,
};
const std::vector<int64_t> known_mod_1000 = {921, 955, 249, 592, 10, 981, 476};
const std::vector<int64_t> known_mod_7 = {6, 6, 0, 6, 0, 0, 2};

// TensorFlow 2.21's ids of `known`: tf.strings.to_hash_bucket_fast(known, N)
// for N = 1000, 7 and 2**62 (FarmHash's Fingerprint64 mod N).
const std::vector<int64_t> tf_mod_1000 = {263, 939, 385, 11, 587, 904, 284};
const std::vector<int64_t> tf_mod_7 = {6, 5, 1, 0, 5, 1, 0};
const std::vector<int64_t> tf_mod_2_62 = {
  1936946117179621455, 3694432073954588131, 2640714258260161385,
  1769834696496558107, 2156005646011579779, 2909837915285000904,
  3152101869897863476,
};

std::vector<int64_t> ids(const batch& b, const std::string& field) {
  auto& t = b.at(field);
  REQUIRE(t.type() == dtype::i64);
  REQUIRE(t.shape() == tensor::shape_type{b.records()});
  return {t.data_as<int64_t>(), t.data_as<int64_t>() + b.records()};
}

topology::Stage stage(const std::string& text) {
  topology::Stage s;
  s.set_name("h");
  s.set_type("hash_bucket");
  auto* c = s.mutable_hash_bucket();
  // text: "INPUT OUTPUT BUCKETS; ..." with "-" for unset.
  size_t at = 0;
  while (at < text.size()) {
    auto end = text.find(';', at);
    if (end == std::string::npos)
      end = text.size();
    std::istringstream in{text.substr(at, end - at)};
    std::string input, output, buckets;
    in >> input >> output >> buckets;
    auto* f = c->add_feature();
    if (input != "-")
      f->set_input(input);
    if (output != "-")
      f->set_output(output);
    if (buckets != "-")
      f->set_buckets(std::stoll(buckets));
    at = end + 1;
  }
  return s;
}

batch known_strings() {
  batch b;
  std::vector<std::string_view> views(known.begin(), known.end());
  b.set("s", tensor::strings(views));
  auto n = static_cast<int64_t>(known.size());
  auto label = tensor::allocate(dtype::i64, {n});
  for (size_t i = 0; i < known.size(); ++i)
    label.mutable_data_as<int64_t>()[i] = static_cast<int64_t>(i);
  b.set("label", std::move(label));
  return b;
}

} // namespace

TEST_CASE("hash_bucket ids are XXH64 of the bytes, seed 0, mod buckets",
          "[hash_bucket][input]") {
  for (size_t i = 0; i < known.size(); ++i) {
    CHECK(XXH64(known[i].data(), known[i].size(), 0) == known_xxh64[i]);
    CHECK(hash_bucket_id(known[i], 1000) == known_mod_1000[i]);
    CHECK(hash_bucket_id(known[i], 7) == known_mod_7[i]);
    CHECK(hash_bucket_id(known[i], 1) == 0);
  }
  // A bucket count of 2^62 still gives ids in range (unsigned modulo).
  auto big = int64_t{1} << 62;
  CHECK(hash_bucket_id(known[0], big)
        == static_cast<int64_t>(known_xxh64[0] % static_cast<uint64_t>(big)));

  auto reg = make_registry(std::make_shared<observations>());
  // s -> s_1000 (s kept), s -> s (replaced) with the stage's default 7.
  auto s = stage("s s_1000 1000; s - -");
  s.mutable_hash_bucket()->set_buckets(7);
  REQUIRE(reg.find("hash_bucket")->check(s).empty());
  collecting_emitter out;
  reg.find("hash_bucket")->make(stage_info{}, s)->process(known_strings(), out);
  REQUIRE(out.items.size() == 1);
  auto& b = out.items[0];
  CHECK(ids(b, "s_1000") == known_mod_1000);
  CHECK(ids(b, "s") == known_mod_7); // both read the strings as they came
  CHECK(ids(b, "label") == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6});
  CHECK(b.fields.size() == 3);
}

TEST_CASE("hash_bucket with hash fingerprint64 gives TensorFlow's ids",
          "[hash_bucket][input]") {
  auto fp = string_hash::fingerprint64;
  for (size_t i = 0; i < known.size(); ++i) {
    CHECK(hash_bucket_id(known[i], 1000, fp) == tf_mod_1000[i]);
    CHECK(hash_bucket_id(known[i], 7, fp) == tf_mod_7[i]);
    CHECK(hash_bucket_id(known[i], int64_t{1} << 62, fp) == tf_mod_2_62[i]);
  }
  auto reg = make_registry(std::make_shared<observations>());
  auto s = stage("s s_1000 1000; s - 7");
  s.mutable_hash_bucket()->set_hash("fingerprint64");
  REQUIRE(reg.find("hash_bucket")->check(s).empty());
  collecting_emitter out;
  reg.find("hash_bucket")->make(stage_info{}, s)->process(known_strings(), out);
  REQUIRE(out.items.size() == 1);
  CHECK(ids(out.items[0], "s_1000") == tf_mod_1000);
  CHECK(ids(out.items[0], "s") == tf_mod_7);
  // "xxh64" spelled out is the default.
  s.mutable_hash_bucket()->set_hash("xxh64");
  collecting_emitter out2;
  reg.find("hash_bucket")->make(stage_info{}, s)->process(known_strings(), out2);
  CHECK(ids(out2.items.at(0), "s_1000") == known_mod_1000);
}

TEST_CASE("hash_bucket ids stay below buckets and fill them",
          "[hash_bucket][input]") {
  std::vector<std::string> words;
  for (int i = 0; i < 2000; ++i)
    words.push_back("word" + std::to_string(i));
  std::vector<std::string_view> views(words.begin(), words.end());
  batch in;
  in.set("w", tensor::strings(views));
  auto reg = make_registry(std::make_shared<observations>());
  collecting_emitter out;
  reg.find("hash_bucket")
    ->make(stage_info{}, stage("w - 13"))
    ->process(std::move(in), out);
  auto got = ids(out.items.at(0), "w");
  std::set<int64_t> seen(got.begin(), got.end());
  CHECK(*seen.begin() == 0);
  CHECK(*seen.rbegin() == 12);
  CHECK(seen.size() == 13);
  for (size_t i = 0; i < words.size(); ++i)
    CHECK(got[i]
          == static_cast<int64_t>(XXH64(words[i].data(), words[i].size(), 0)
                                  % 13));
}

TEST_CASE("hash_bucket refuses a field that is not one string per record",
          "[hash_bucket][bad-input]") {
  auto reg = make_registry(std::make_shared<observations>());
  auto logic = reg.find("hash_bucket")->make(stage_info{}, stage("s - 10"));
  collecting_emitter out;
  batch numbers;
  numbers.set("s", tensor::allocate(dtype::i64, {3}));
  CHECK_THROWS_AS(logic->process(batch{numbers}, out), input_error);
  CHECK_THROWS_WITH(logic->process(batch{numbers}, out),
                    "hash_bucket: field 's' is i64[3], not one string "
                    "(bytes [n]) per record");
  batch other;
  other.set("t", tensor::strings({"x"}));
  other.set("label", tensor::allocate(dtype::i64, {1}));
  CHECK_THROWS_WITH(logic->process(std::move(other), out),
                    "hash_bucket: the item has no field 's' (it has: t, "
                    "label)");
  CHECK(out.items.empty());
}

TEST_CASE("hash_bucket configs need features with buckets and distinct "
          "outputs",
          "[hash_bucket][bad-input]") {
  auto reg = make_registry(std::make_shared<observations>());
  auto& type = *reg.find("hash_bucket");
  // The schema's required fields first (stage_type::config_required), as
  // the loader checks them, then the type's check.
  auto problem = [&](topology::Stage s) {
    auto missing = missing_config(s, type);
    return missing.empty() ? type.check(s) : missing;
  };
  // Without its block the loader refuses the stage, naming what the block
  // needs (stage_type::config_block), before the type's check runs.
  auto blockless = load_topology_text(
    R"(stage { name: "s" type: "synthetic_source" }
       stage { name: "h" type: "hash_bucket" input { stage: "s" } }
       stage { name: "k" type: "sink" input { stage: "h" } })",
    "t.pbtxt", reg);
  REQUIRE_FALSE(blockless.ok());
  REQUIRE(blockless.errors.size() == 1);
  CHECK(blockless.errors[0].message
        == "stage 'h' (hash_bucket): needs a hash_bucket { feature { input: "
           "\"...\" } } block");
  topology::Stage none;
  none.set_type("hash_bucket");
  none.mutable_hash_bucket();
  CHECK(problem(none)
        == "hash_bucket.feature is required (hash_bucket { feature { input: "
           "\"...\" } })");
  CHECK(problem(stage("a - -"))
        == "hash_bucket.feature[0] ('a'): buckets is required (here or as "
           "hash_bucket.buckets)");
  CHECK(problem(stage("a - 5; b - 0"))
        == "hash_bucket.feature[1] ('b'): buckets must be > 0, got 0");
  CHECK(problem(stage("a y 5; - x 5"))
        == "hash_bucket.feature[1].input is required (hash_bucket { feature { "
           "input: \"...\" } })");
  CHECK(problem(stage("a x 5; b x 5"))
        == "hash_bucket.feature[1]: output 'x' is also feature[0]'s "
           "(outputs must differ)");
  CHECK(problem(stage("a - 5; b a 5"))
        == "hash_bucket.feature[1]: output 'a' is also feature[0]'s "
           "(outputs must differ)");
  auto neg = stage("a - -");
  neg.mutable_hash_bucket()->set_buckets(-3);
  CHECK(problem(neg) == "hash_bucket.buckets must be > 0, got -3");
  auto farm = stage("a - 5");
  farm.mutable_hash_bucket()->set_hash("farmhash");
  CHECK(problem(farm)
        == "hash_bucket.hash must be \"xxh64\" (the default) or "
           "\"fingerprint64\" (TensorFlow's), got \"farmhash\"");
  CHECK_THROWS_WITH(type.make(stage_info{}, neg),
                    "hash_bucket.buckets must be > 0, got -3");

  // As `actorflow validate` reports it: with the file and the stage's line.
  auto loaded = load_topology_text(
    R"(stage { name: "src" type: "synthetic_source" }
       stage { name: "h" type: "hash_bucket" input { stage: "src" }
               hash_bucket { feature { input: "s" } } }
       stage { name: "sink" type: "collect" input { stage: "h" } })",
    "t.pbtxt", reg);
  REQUIRE(loaded.errors.size() == 1);
  CHECK_THAT(loaded.errors[0].to_string(),
             Catch::Contains("t.pbtxt:2") && Catch::Contains("buckets is "
                                                             "required"));
}
