// tokenize: words to vocabulary ids (case folded, punctuation split off,
// UTF-8 words whole, unknown words dropped or mapped, max_tokens), the
// var_len layout padded_batch takes, and vocabulary files refused by line.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "tests/support/harness.hpp"
#include "tests/support/temp_dir.hpp"

using namespace af;
using namespace af::test;

namespace {

std::vector<std::vector<int64_t>> ids_of(const batch& b,
                                         const std::string& field) {
  std::vector<std::vector<int64_t>> out;
  auto& t = b.at(field);
  auto& len = b.at(field + "_length");
  REQUIRE(t.shape().size() == 2);
  auto w = t.shape()[1];
  for (int64_t i = 0; i < b.records(); ++i) {
    std::vector<int64_t> row;
    for (int64_t k = 0; k < w; ++k) {
      auto v = t.data_as<int64_t>()[i * w + k];
      if (k < len.data_as<int64_t>()[i])
        row.push_back(v);
      else
        CHECK(v == 0); // padding
    }
    out.push_back(row);
  }
  return out;
}

std::shared_ptr<stage_logic> make(const registry& reg, const std::string& vocab,
                                  int64_t oov, int64_t max_tokens) {
  topology::Stage s;
  s.set_type("tokenize");
  auto* c = s.mutable_tokenize();
  c->set_vocabulary(vocab);
  if (oov != -2)
    c->set_oov_id(oov);
  c->set_max_tokens(max_tokens);
  return reg.find("tokenize")->make(stage_info{}, s);
}

} // namespace

TEST_CASE("tokenize maps words to their vocabulary lines",
          "[tokenize][input]") {
  temp_dir dir;
  auto vocab = dir.write("vocab.txt", "<pad>\nthe\ncat\nsat\ncafé\nit's\n<unk>\n");
  auto reg = make_registry(std::make_shared<observations>());
  auto texts = [] {
    batch b;
    b.set("text", tensor::strings({"The cat SAT.", "", "a dog, the café!",
                                   "it's -- the   cat\tsat", "zebra"}));
    auto label = tensor::allocate(dtype::i64, {5});
    b.set("label", std::move(label));
    return b;
  };
  collecting_emitter out;
  make(reg, vocab, -2, 0)->process(texts(), out); // unknown words dropped
  make(reg, vocab, 6, 0)->process(texts(), out);  // ... or <unk>
  make(reg, vocab, -2, 2)->process(texts(), out); // at most 2 ids
  REQUIRE(out.items.size() == 3);
  using rows = std::vector<std::vector<int64_t>>;
  CHECK(ids_of(out.items[0], "tokens")
        == rows{{1, 2, 3}, {}, {1, 4}, {5, 1, 2, 3}, {}});
  CHECK(ids_of(out.items[1], "tokens")
        == rows{{1, 2, 3}, {}, {6, 6, 1, 4}, {5, 1, 2, 3}, {6}});
  CHECK(ids_of(out.items[2], "tokens")
        == rows{{1, 2}, {}, {1, 4}, {5, 1}, {}});
  CHECK(out.items[0].at("tokens").shape()[1] == 4); // the longest record
  CHECK(out.items[0].find("text") != nullptr);     // passes through
  CHECK(out.items[0].find("label") != nullptr);
}

TEST_CASE_METHOD(fixture, "tokenize feeds padded_batch a fixed width",
                 "[tokenize][padded_batch][input]") {
  temp_dir dir;
  dir.write("vocab.txt", "<pad>\na\nb\nc\n");
  std::string csv = "text,label\n";
  for (int i = 0; i < 30; ++i) {
    std::string words;
    for (int k = 0; k < i % 5; ++k)
      words += k % 2 ? "b " : "a ";
    csv += words + "c," + std::to_string(i) + "\n";
  }
  dir.write("t.csv", csv);
  auto job = [&](int width) {
    return R"(
      stage { name: "read" type: "csv_source"
              csv_source { files: ")" + dir.file("t.csv") + R"("
                           column { name: "text" type: "string" }
                           column { name: "label" type: "int64" }
                           records_per_item: 7 } }
      stage { name: "tok" type: "tokenize" input { stage: "read" }
              tokenize { vocabulary: ")" + dir.file("vocab.txt") + R"(" } }
      stage { name: "batch" type: "padded_batch" input { stage: "tok" }
              padded_batch { batch_size: 8 width: )" + std::to_string(width)
           + R"( } }
      stage { name: "sink" type: "collect" input { stage: "batch" } })";
  };
  auto r = run_text(sys, reg, job(6));
  REQUIRE(r.ok);
  int64_t seen = 0;
  for (auto& b : obs->collected) {
    CHECK(b.at("tokens").shape() == tensor::shape_type{b.records(), 6});
    auto rows = ids_of(b, "tokens");
    for (int64_t i = 0; i < b.records(); ++i, ++seen) {
      auto label = b.at("label").data_as<int64_t>()[i];
      CHECK(label == seen);
      std::vector<int64_t> want;
      for (int k = 0; k < label % 5; ++k)
        want.push_back(k % 2 ? 2 : 1);
      want.push_back(3);
      CHECK(rows[static_cast<size_t>(i)] == want);
    }
  }
  CHECK(seen == 30);
  auto narrow = run_text(sys, reg, job(3));
  CHECK_FALSE(narrow.ok);
  CHECK_THAT(narrow.error, Catch::Contains("field 'tokens': a record holds 4 "
                                           "values, more than the width 3"));
}

TEST_CASE("tokenize refuses a vocabulary it cannot use, naming the line",
          "[tokenize][bad-input]") {
  temp_dir dir;
  auto csv = dir.write("t.csv", "text\nhello\n");
  auto reg = make_registry(std::make_shared<observations>());
  auto problem = [&](const std::string& vocab, const std::string& extra) {
    auto loaded = load_topology_text(
      R"(stage { name: "read" type: "csv_source"
                 csv_source { files: ")" + csv + R"("
                              column { name: "text" type: "string" } } }
         stage { name: "tok" type: "tokenize" input { stage: "read" }
                 tokenize { vocabulary: ")" + vocab + "\" " + extra + R"( } }
         stage { name: "sink" type: "collect" input { stage: "tok" } })",
      "t.pbtxt", reg);
    std::string all;
    for (auto& e : loaded.errors)
      all += e.to_string() + "\n";
    return all;
  };
  CHECK_THAT(problem(dir.write("dup.txt", "a\nb\na\n"), ""),
             Catch::Contains("dup.txt:3: 'a' is already on line 1"));
  CHECK_THAT(problem(dir.write("gap.txt", "a\n\nb\n"), ""),
             Catch::Contains("gap.txt:2: an empty line"));
  CHECK_THAT(problem(dir.file("none.txt"), ""),
             Catch::Contains("none.txt: cannot open"));
  CHECK_THAT(problem(dir.write("ok.txt", "a\nb\n"), "oov_id: 2"),
             Catch::Contains("oov_id 2 is not a line of the vocabulary"));
  CHECK(problem(dir.file("ok.txt"), "oov_id: 1").empty());
}
