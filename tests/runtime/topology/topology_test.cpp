#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <unistd.h>

#include "actorflow/actors/builtin.hpp"
#include "actorflow/runtime/topology/topology.hpp"

using namespace af;

namespace {

registry builtin() {
  registry reg;
  register_builtin_stages(reg);
  return reg;
}

// Loads `text` and returns its errors as "file:line: message" lines.
std::vector<std::string> errors_of(const std::string& text) {
  auto reg = builtin();
  auto r = load_topology_text(text, "t.pbtxt", reg);
  std::vector<std::string> out;
  for (auto& e : r.errors)
    out.push_back(e.to_string());
  if (out.empty())
    REQUIRE(r.ok());
  return out;
}

bool has_error(const std::vector<std::string>& errors,
               const std::string& prefix, const std::string& part) {
  for (auto& e : errors)
    if (e.rfind(prefix, 0) == 0 && e.find(part) != std::string::npos)
      return true;
  return false;
}

const char* good = R"(name: "ok"
stage { name: "src" type: "synthetic_source" }
stage { name: "sink" type: "sink" input { stage: "src" } }
)";

} // namespace

TEST_CASE("a valid topology loads with its stages in dependency order",
          "[topology]") {
  auto reg = builtin();
  auto r = load_topology_text(R"(
stage { name: "sink" type: "sink" input { stage: "map" } }
stage { name: "map" type: "transform" replicas: 2 input { stage: "src" } }
stage { name: "src" type: "synthetic_source" }
)",
                              "t.pbtxt", reg);
  REQUIRE(r.ok());
  auto& t = *r.topology;
  CHECK(t.order == std::vector<size_t>{2, 1, 0});
  CHECK(t.stage_line == std::vector<int>{2, 3, 4});
  CHECK(replicas_of(t.spec.stage(1)) == 2);
  CHECK(window_of(t.spec.stage(0).input(0)) == default_window);
}

TEST_CASE("syntax errors name the line", "[topology]") {
  auto e = errors_of("name: \"x\"\nstage {\n  name: \"a\"\n  bogus: 3\n}\n");
  REQUIRE(e.size() == 1);
  CHECK(has_error(e, "t.pbtxt:4: ", "bogus"));
  e = errors_of("stage { name: \"a\"\n");
  CHECK(has_error(e, "t.pbtxt:2: ", "Expected identifier"));
}

TEST_CASE("semantic errors name the line", "[topology]") {
  SECTION("unknown stage type") {
    auto e = errors_of(R"(stage { name: "src" type: "synthetic_source" }
stage { name: "x" type: "no_such_type" input { stage: "src" } }
)");
    CHECK(has_error(e, "t.pbtxt:2: ", "unknown stage type 'no_such_type'"));
    CHECK(has_error(e, "t.pbtxt:2: ", "batcher")); // lists known types
  }
  SECTION("input naming a stage that does not exist") {
    auto e = errors_of(R"(stage { name: "src" type: "synthetic_source" }
stage {
  name: "sink" type: "sink"
  input { stage: "nowhere" }
}
)");
    CHECK(has_error(e, "t.pbtxt:4: ", "'nowhere' names a stage that does not"));
  }
  SECTION("cycles") {
    auto e = errors_of(R"(stage { name: "src" type: "synthetic_source" }
stage { name: "a" type: "transform" input { stage: "src" } input { stage: "b" } }
stage { name: "b" type: "transform" input { stage: "a" } }
stage { name: "sink" type: "sink" input { stage: "b" } }
)");
    CHECK(has_error(e, "t.pbtxt:", "cycle"));
    bool names_both = false;
    for (auto& x : e)
      if (x.find("cycle") != std::string::npos
          && x.find("a <- b") != std::string::npos)
        names_both = true;
    CHECK(names_both);
  }
  SECTION("duplicate stage names") {
    auto e = errors_of(R"(stage { name: "src" type: "synthetic_source" }
stage { name: "sink" type: "sink" input { stage: "src" } }
stage { name: "sink" type: "sink" input { stage: "src" } }
)");
    CHECK(has_error(e, "t.pbtxt:3: ",
                    "duplicate stage name 'sink' (first "
                    "defined on line 2)"));
  }
  SECTION("replicas < 1") {
    auto e = errors_of(R"(stage { name: "src" type: "synthetic_source" }
stage { name: "sink" type: "sink"
        replicas: 0
        input { stage: "src" } }
)");
    CHECK(has_error(e, "t.pbtxt:3: ", "replicas must be >= 1, got 0"));
  }
  SECTION("max_replicas below replicas, or on a stage that cannot join") {
    auto e = errors_of(R"(stage { name: "src" type: "synthetic_source" }
stage { name: "sink" type: "sink"
        replicas: 2
        max_replicas: 1
        input { stage: "src" } }
)");
    CHECK(has_error(e, "t.pbtxt:4: ",
                    "max_replicas (1) is below replicas (2)"));
    e = errors_of(R"(stage { name: "src" type: "synthetic_source" }
stage { name: "sink" type: "sink"
        max_replicas: 3
        input { stage: "src" } }
)");
    CHECK(has_error(e, "t.pbtxt:3: ",
                    "max_replicas needs a stage type whose replicas may "
                    "join a running job (trainer), not 'sink'"));
  }
  SECTION("max_replicas on a trainer in this process, or one read by "
          "another stage") {
    auto e = errors_of(R"(host { name: "w1" address: "127.0.0.1:4100" }
stage { name: "src" type: "synthetic_source" }
stage { name: "train" type: "trainer"
        max_replicas: 2
        input { stage: "src" } }
stage { name: "far" type: "trainer"
        hosts: ["w1"]
        max_replicas: 2
        input { stage: "src" } }
stage { name: "sink" type: "sink" input { stage: "far" } }
)");
    CHECK(has_error(e, "t.pbtxt:4: ",
                    "stage 'train': max_replicas needs hosts"));
    CHECK(has_error(e, "t.pbtxt:8: ",
                    "max_replicas needs a stage that nothing consumes, and "
                    "stage 'sink' reads it"));
  }
  SECTION("window < 1") {
    auto e = errors_of(R"(stage { name: "src" type: "synthetic_source" }
stage { name: "sink" type: "sink"
        input { stage: "src"
                window: -2 } }
)");
    CHECK(has_error(e, "t.pbtxt:4: ", "window of input 'src' must be >= 1"));
  }
  SECTION("kind rules") {
    auto e = errors_of(R"(stage { name: "src" type: "synthetic_source" }
stage { name: "t" type: "transform" }
stage { name: "sink" type: "sink" input { stage: "src" } }
stage { name: "after" type: "sink" input { stage: "sink" } }
)");
    CHECK(has_error(e, "t.pbtxt:2: ", "needs at least one input"));
    CHECK(has_error(e, "t.pbtxt:2: ", "has no consumer"));
    CHECK(has_error(e, "t.pbtxt:4: ", "which is a sink"));
  }
  SECTION("stage configuration checks") {
    auto e = errors_of(R"(stage { name: "src" type: "synthetic_source" }
stage { name: "b" type: "batcher" input { stage: "src" } batcher { batch_size: 0 } }
stage { name: "sink" type: "sink" input { stage: "b" } }
)");
    CHECK(has_error(e, "t.pbtxt:2: ", "batch_size must be >= 1"));
  }
  SECTION("all problems are reported at once, in line order") {
    auto e =
      errors_of(R"(stage { name: "src" type: "synthetic_source" replicas: 0 }
stage { name: "sink" type: "nope" input { stage: "src" } }
)");
    REQUIRE(e.size() >= 2);
    CHECK(e[0].rfind("t.pbtxt:1: ", 0) == 0);
    CHECK(e[1].rfind("t.pbtxt:2: ", 0) == 0);
  }
}

TEST_CASE("a stage type's schema: the loader names a missing block or "
          "required field, the registry refuses fields that do not exist",
          "[topology][schema]") {
  // Every built-in type with a block lists it in its synopsis, once.
  auto reg = builtin();
  for (auto* t : reg.list()) {
    INFO(t->name);
    auto synopsis = config_synopsis(*t);
    CHECK(synopsis.empty() == t->config_block.empty());
    for (auto& path : t->config_required)
      CHECK(synopsis.find(path.substr(path.rfind('.') + 1))
            != std::string::npos);
  }
  auto* batcher = reg.find("batcher");
  REQUIRE(batcher != nullptr);
  CHECK(config_synopsis(*batcher) == "batcher { batch_size: N }");
  auto errors = errors_of(R"(
    stage { name: "s" type: "synthetic_source" }
    stage { name: "b" type: "batcher" input { stage: "s" } }
    stage { name: "c" type: "csv_source" csv_source { files: "x"
            column { name: "a" type: "int64" } column { name: "b" } } }
    stage { name: "k" type: "sink" input { stage: "b" } input { stage: "c" } })");
  CHECK(has_error(errors, "t.pbtxt:3: ",
                  "stage 'b' (batcher): needs a batcher { batch_size: N } "
                  "block"));
  CHECK(has_error(errors, "t.pbtxt:4: ",
                  "stage 'c' (csv_source): csv_source.column[1].type is "
                  "required (csv_source { files: \"...\" column { name: "
                  "\"...\" type: \"...\" } })"));
  // take's count has presence: 0 is set (and passes).
  CHECK(errors_of(R"(
    stage { name: "s" type: "synthetic_source" }
    stage { name: "t" type: "take" input { stage: "s" } take { count: 0 } }
    stage { name: "k" type: "sink" input { stage: "t" } })").empty());

  auto type = [](std::string block, std::vector<std::string> required) {
    stage_type t;
    t.name = "mine";
    t.config_block = std::move(block);
    t.config_required = std::move(required);
    t.make = [](const stage_info&, const topology::Stage&) {
      return std::shared_ptr<stage_logic>{};
    };
    return t;
  };
  registry mine;
  CHECK_THROWS_WITH(mine.add(type("batchr", {})),
                    "stage type 'mine': Stage has no config block 'batchr'");
  CHECK_THROWS_WITH(mine.add(type("batcher", {"batch"})),
                    "stage type 'mine': BatcherConfig has no field 'batch' "
                    "(config_required \"batch\")");
  CHECK_THROWS_WITH(mine.add(type("batcher", {"batch_size.x"})),
                    "stage type 'mine': BatcherConfig.batch_size is not a "
                    "message (config_required \"batch_size.x\")");
  CHECK_THROWS_WITH(mine.add(type("", {"batch_size"})),
                    Catch::Contains("config_required without a config_block"));
  CHECK(mine.list().empty());
  mine.add(type("numeric", {"feature.input", "feature.op"}));
  CHECK(config_synopsis(*mine.find("mine"))
        == "numeric { feature { input: \"...\" op: \"...\" } }");
}

TEST_CASE("bad files get a clear error, never a crash", "[topology]") {
  auto reg = builtin();
  auto dir = std::string{"/tmp/af_topology_test_"} + std::to_string(::getpid());
  REQUIRE(std::system(("mkdir -p " + dir).c_str()) == 0);
  auto write = [&](const std::string& name, const std::string& content) {
    auto path = dir + "/" + name;
    std::ofstream out{path, std::ios::binary};
    out << content;
    return path;
  };
  auto first_error = [&](const std::string& path) {
    auto r = load_topology_file(path, reg);
    REQUIRE_FALSE(r.ok());
    REQUIRE_FALSE(r.errors.empty());
    return r.errors.front().to_string();
  };
  CHECK_THAT(first_error(dir + "/missing.pbtxt"),
             Catch::Contains("missing.pbtxt: cannot open: No such file"));
  CHECK_THAT(first_error(write("empty.pbtxt", "")),
             Catch::Contains("empty.pbtxt: file is empty"));
  CHECK_THAT(first_error(write("blank.pbtxt", "  \n\n")),
             Catch::Contains("file is empty"));
  std::string garbage;
  for (int i = 0; i < 4096; ++i)
    garbage.push_back(static_cast<char>((i * 7919 + 13) % 256));
  CHECK_THAT(first_error(write("garbage.pbtxt", garbage)),
             Catch::Contains("not a text file (NUL byte at offset"));
  std::string binary_no_nul;
  for (int i = 0; i < 4096; ++i)
    binary_no_nul.push_back(static_cast<char>(1 + (i * 7919 + 13) % 255));
  CHECK_THAT(first_error(write("binary.pbtxt", binary_no_nul)),
             Catch::Contains("binary.pbtxt:1: "));
  std::string big(100u << 20, ' ');
  CHECK_THAT(first_error(write("big.pbtxt", big)),
             Catch::Contains("topology files are limited to 16 MiB"));
  CHECK_THAT(first_error(dir), Catch::Contains("is a directory"));
  auto ok = load_topology_file(write("good.pbtxt", good), reg);
  CHECK(ok.ok());
  REQUIRE(std::system(("rm -rf " + dir).c_str()) == 0);
}

TEST_CASE("random mutations of a valid topology never crash the loader",
          "[topology][fuzz]") {
  // A cheap, deterministic fuzz loop under the sanitizers: flip, insert,
  // delete and duplicate bytes of a valid file; every result must either
  // load or be rejected with a located message.
  auto reg = builtin();
  const std::string base = R"(name: "fuzz"
stage { name: "src" type: "synthetic_source"
        synthetic_source { records: 100 record_bytes: 8 } }
stage { name: "map" type: "transform" replicas: 2
        input { stage: "src" window: 4 byte_budget: 1024 } }
stage { name: "b" type: "batcher" input { stage: "map" }
        batcher { batch_size: 16 } }
stage { name: "sink" type: "sink" input { stage: "b" } }
runtime { threads: 2 scheduler: "sharing" }
)";
  uint64_t state = 0x9e3779b97f4a7c15ULL;
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  const char alphabet[] = "{}:\"#\n 0123456789-abcdefghijklmnopqrstuvwxyz_";
  int loaded = 0;
  for (int round = 0; round < 50000; ++round) {
    auto text = base;
    auto edits = 1 + next() % 4;
    for (uint64_t k = 0; k < edits && !text.empty(); ++k) {
      auto pos = next() % text.size();
      switch (next() % 4) {
        case 0:
          text[pos] = static_cast<char>(next() % 256);
          break;
        case 1:
          text.insert(pos, 1, alphabet[next() % (sizeof alphabet - 1)]);
          break;
        case 2:
          text.erase(pos, 1 + next() % 8);
          break;
        default:
          text.insert(pos, text.substr(pos, next() % 40));
      }
    }
    auto r = load_topology_text(text, "f.pbtxt", reg);
    if (r.ok()) {
      ++loaded;
      continue;
    }
    REQUIRE_FALSE(r.errors.empty());
    for (auto& e : r.errors)
      REQUIRE(e.to_string().rfind("f.pbtxt:", 0) == 0);
  }
  // Some mutations (in comments, numbers, names) still give valid files.
  CHECK(loaded > 0);
}
