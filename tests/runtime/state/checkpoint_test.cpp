// The checkpoint store (runtime/state/checkpoint.hpp): round trips, retention,
// falling back past damaged or half-written checkpoints, part names that
// are not file names, and large and empty parts.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "actorflow/runtime/formats/crc32c.hpp"
#include "actorflow/runtime/state/checkpoint.hpp"
#include "tests/support/temp_dir.hpp"

using namespace af;
namespace fs = std::filesystem;

namespace {

// A checkpoint whose bytes depend on the step: binary, with NUL and
// newline bytes, one part empty.
checkpoint sample(uint64_t step) {
  checkpoint c;
  c.step = step;
  std::string ps = "shard bytes ";
  ps += std::to_string(step);
  ps += std::string{"\0\n\xff\x01", 4};
  c.parts.push_back({"ps[0]", ps});
  c.parts.push_back({"read[0]", "offset " + std::to_string(step * 100)});
  c.parts.push_back({"job", ""});
  return c;
}

void require_equal(const checkpoint& a, const checkpoint& b) {
  REQUIRE(a.step == b.step);
  REQUIRE(a.parts.size() == b.parts.size());
  for (size_t i = 0; i < a.parts.size(); ++i) {
    INFO("part " << i);
    CHECK(a.parts[i].name == b.parts[i].name);
    CHECK(a.parts[i].bytes == b.parts[i].bytes);
  }
}

std::set<std::string> entries(const std::string& dir) {
  std::set<std::string> out;
  for (auto& e : fs::directory_iterator(dir))
    out.insert(e.path().filename().string());
  return out;
}

void flip_byte(const std::string& path, std::streamoff at) {
  std::fstream f{path, std::ios::in | std::ios::out | std::ios::binary};
  REQUIRE(f);
  f.seekg(at);
  char c = 0;
  f.get(c);
  f.seekp(at);
  f.put(static_cast<char>(c ^ 0x20));
  REQUIRE(f);
}

} // namespace

TEST_CASE("a checkpoint round-trips through the store", "[checkpoint]") {
  test::temp_dir td;
  checkpoint_store store{td.file("ckpt")};
  CHECK_FALSE(store.latest()); // no directory yet
  CHECK(store.steps().empty());
  store.write(sample(5));
  auto back = store.latest();
  REQUIRE(back);
  require_equal(*back, sample(5));
  CHECK(store.steps() == std::vector<uint64_t>{5});
  CHECK(store.path_of(5) == td.file("ckpt") + "/ckpt-00000000000000000005");
  CHECK(entries(store.path_of(5))
        == std::set<std::string>{"MANIFEST", "ps[0].part", "read[0].part",
                                 "job.part"});
  CHECK(fs::file_size(store.path_of(5) + "/job.part") == 0);
  // The manifest is text that says what is there.
  auto manifest = test::temp_dir::read(store.path_of(5) + "/MANIFEST");
  CHECK(manifest.rfind("actorflow-checkpoint 2\nstep 5\nparts 3\n", 0) == 0);
  CHECK_THAT(manifest, Catch::Contains("part job.part 0 00000000 job\n"));
  // Another store on the same directory sees it.
  checkpoint_store again{td.file("ckpt"), 1};
  REQUIRE(again.latest());
  require_equal(*again.latest(), sample(5));
}

TEST_CASE("a checkpoint store keeps the newest K complete checkpoints",
          "[checkpoint]") {
  test::temp_dir td;
  checkpoint_store store{td.file("ckpt"), 2};
  for (uint64_t step : {10, 20, 30, 40, 50}) {
    store.write(sample(step));
    CHECK(store.steps().back() == step);
  }
  CHECK(store.steps() == std::vector<uint64_t>{40, 50});
  CHECK(entries(td.file("ckpt"))
        == std::set<std::string>{"ckpt-00000000000000000040",
                                 "ckpt-00000000000000000050"});
  require_equal(*store.latest(), sample(50));
  // An incomplete one does not count towards K: 50 goes only once two
  // complete ones are newer.
  fs::remove(store.path_of(40) + "/MANIFEST");
  store.write(sample(60));
  CHECK(store.steps() == std::vector<uint64_t>{50, 60});
  CHECK_THROWS_AS(checkpoint_store(td.file("x"), 0), std::invalid_argument);
}

TEST_CASE("a damaged or half-written newest checkpoint falls back to the "
          "previous complete one",
          "[checkpoint]") {
  test::temp_dir td;
  checkpoint_store store{td.file("ckpt"), 3};
  store.write(sample(1));
  store.write(sample(2));
  auto newest = store.path_of(2);
  // What latest() falls back to, and what steps() lists before and after
  // the next write. Only latest() reads parts whole: a part of the right
  // size with a wrong CRC still counts as complete for steps() and
  // retention.
  uint64_t fallback = 1;
  std::vector<uint64_t> listed{1};
  std::vector<uint64_t> after{1, 4};
  SECTION("a truncated part") {
    fs::resize_file(newest + "/ps[0].part", 3);
  }
  SECTION("a flipped byte in a part") {
    flip_byte(newest + "/read[0].part", 2);
    listed = {1, 2};
    after = {1, 2, 4};
  }
  SECTION("a flipped byte in the manifest") {
    flip_byte(newest + "/MANIFEST", 30);
  }
  SECTION("a missing part") {
    fs::remove(newest + "/job.part");
  }
  SECTION("a missing manifest") {
    fs::remove(newest + "/MANIFEST");
  }
  SECTION("a later checkpoint cut short with its files still .tmp") {
    // What a crash during write(3) leaves: the old ones intact.
    newest = store.path_of(3);
    fs::create_directory(newest);
    td.write("ckpt/ckpt-00000000000000000003/ps[0].part", "complete");
    td.write("ckpt/ckpt-00000000000000000003/read[0].part.tmp", "half");
    fallback = 2;
    listed = {1, 2};
    after = {1, 2, 4};
  }
  SECTION("a later checkpoint whose manifest is still .tmp") {
    newest = store.path_of(3);
    fs::copy(store.path_of(2), newest, fs::copy_options::recursive);
    fs::rename(newest + "/MANIFEST", newest + "/MANIFEST.tmp");
    fallback = 2;
    listed = {1, 2};
    after = {1, 2, 4};
  }
  auto back = store.latest();
  REQUIRE(back);
  require_equal(*back, sample(fallback));
  CHECK(store.steps() == listed);
  // The next write removes an incomplete one (one above the new step
  // included) and keeps the complete ones.
  store.write(sample(4));
  require_equal(*store.latest(), sample(4));
  CHECK(store.steps() == after);
  CHECK(fs::exists(newest) == (after.size() == 3 && fallback == 1));
}

TEST_CASE("a checkpoint store writing an earlier or the same step replaces "
          "what was there",
          "[checkpoint]") {
  test::temp_dir td;
  checkpoint_store store{td.file("ckpt"), 5};
  for (uint64_t step : {1, 2, 3})
    store.write(sample(step));
  // A resumed run from step 1 writes step 2 again: its old step 2 and 3
  // belong to the abandoned run.
  auto c = sample(2);
  c.parts[0].bytes = "the resumed run";
  c.parts.pop_back();
  store.write(c);
  CHECK(store.steps() == std::vector<uint64_t>{1, 2});
  require_equal(*store.latest(), c);
  CHECK(entries(store.path_of(2))
        == std::set<std::string>{"MANIFEST", "ps[0].part", "read[0].part"});
  // A crash's leftovers in the directory of the step being written go.
  fs::create_directory(store.path_of(7));
  td.write("ckpt/ckpt-00000000000000000007/ps[0].part.tmp", "half");
  td.write("ckpt/ckpt-00000000000000000007/stray", "x");
  store.write(sample(7));
  CHECK(entries(store.path_of(7))
        == std::set<std::string>{"MANIFEST", "ps[0].part", "read[0].part",
                                 "job.part"});
  require_equal(*store.latest(), sample(7));
  // Replacing a checkpoint of the same step (a job without trainers cuts
  // every checkpoint at step 0) swaps the new one in whole: nothing of
  // the old one and no ckpt-<step>.new is left, and a crash's leftover
  // .new (half written) is neither taken for a checkpoint nor kept.
  CHECK(entries(td.file("ckpt")) == std::set<std::string>{
          fs::path(store.path_of(1)).filename().string(),
          fs::path(store.path_of(2)).filename().string(),
          fs::path(store.path_of(7)).filename().string()});
  fs::create_directory(store.path_of(7) + ".new");
  td.write("ckpt/ckpt-00000000000000000007.new/ps[0].part", "half");
  CHECK(store.steps() == std::vector<uint64_t>{1, 2, 7});
  require_equal(*store.latest(), sample(7));
  auto again = sample(7);
  again.parts[0].bytes = "the same step again";
  store.write(again);
  require_equal(*store.latest(), again);
  CHECK_FALSE(fs::exists(store.path_of(7) + ".new"));
  CHECK(entries(store.path_of(7))
        == std::set<std::string>{"MANIFEST", "ps[0].part", "read[0].part",
                                 "job.part"});
}

TEST_CASE("checkpoint part names with slashes and dots stay inside the "
          "checkpoint directory",
          "[checkpoint]") {
  test::temp_dir td;
  checkpoint_store store{td.file("store/ckpt")};
  checkpoint c;
  c.step = 9;
  for (auto& name : std::vector<std::string>{
         "../escape", "a/b", "..", ".", "/abs", "MANIFEST", "x.tmp", "%2F",
         "with space", std::string{"nl\n\0z", 5}, "ps[0]"})
    c.parts.push_back({name, "bytes of " + name});
  store.write(c);
  require_equal(*store.latest(), c);
  // One regular file per part, plus the manifest, and nothing elsewhere.
  auto files = entries(store.path_of(9));
  CHECK(files.size() == c.parts.size() + 1);
  for (auto& f : files)
    CHECK(fs::is_regular_file(store.path_of(9) + "/" + f));
  CHECK(files.count("..%2Fescape.part") == 1);
  CHECK(files.count("...part") == 1);
  CHECK(files.count("MANIFEST.part") == 1);
  CHECK(files.count("%252F.part") == 1);
  CHECK(entries(td.path()) == std::set<std::string>{"store"});
  CHECK(entries(td.file("store")) == std::set<std::string>{"ckpt"});
  CHECK(checkpoint_store::file_name("") == "");
  CHECK(checkpoint_store::file_name(std::string(300, 'a')) == "");

  // Names that cannot be stored are refused before anything is written.
  checkpoint bad;
  bad.step = 10;
  bad.parts = {{"a", "1"}, {"a", "2"}};
  CHECK_THROWS_WITH(store.write(bad), Catch::Contains("two parts named"));
  bad.parts = {{"", "1"}};
  CHECK_THROWS_WITH(store.write(bad), Catch::Contains("is empty"));
  bad.parts = {{std::string(300, '/'), "1"}};
  CHECK_THROWS_WITH(store.write(bad), Catch::Contains("too long"));
  CHECK(store.steps() == std::vector<uint64_t>{9});
  CHECK_FALSE(fs::exists(store.path_of(10)));
}

TEST_CASE("a checkpoint with a large part and one with no parts round-trip",
          "[checkpoint]") {
  test::temp_dir td;
  checkpoint_store store{td.file("ckpt")};
  checkpoint empty;
  empty.step = 0;
  store.write(empty);
  REQUIRE(store.latest());
  CHECK(store.latest()->parts.empty());

  checkpoint big;
  big.step = 1;
  std::string bytes(size_t{8} << 20, '\0');
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<char>((i * 2654435761u) >> 13);
  big.parts.push_back({"ps[0]", bytes});
  store.write(big);
  require_equal(*store.latest(), big);
  // One bit wrong in the middle: back to the empty one.
  flip_byte(store.path_of(1) + "/ps[0].part", 4 << 20);
  auto back = store.latest();
  REQUIRE(back);
  CHECK(back->step == 0);
}

TEST_CASE("checkpoint store I/O errors name the path", "[checkpoint]") {
  test::temp_dir td;
  auto file = td.write("not-a-dir", "x");
  checkpoint_store store{file + "/ckpt"};
  CHECK_THROWS_WITH(store.write(sample(1)),
                    Catch::Contains(file)
                      && Catch::Contains("Not a directory"));
  // Reading from there is "no checkpoint", not an error.
  CHECK_FALSE(store.latest());
}

TEST_CASE("a checkpoint of ActorFlow 0.1 (format 1) is refused by name and "
          "never removed",
          "[checkpoint]") {
  test::temp_dir td;
  checkpoint_store store{td.file("ckpt"), 1};
  store.write(sample(5));
  // Rewrite its manifest as 0.1 wrote it: the same lines under
  // "actorflow-checkpoint 1", with the crc line recomputed.
  auto manifest = store.path_of(5) + "/MANIFEST";
  std::string text;
  {
    std::ifstream in{manifest, std::ios::binary};
    text.assign(std::istreambuf_iterator<char>{in}, {});
  }
  REQUIRE(text.rfind("actorflow-checkpoint 2\n", 0) == 0);
  text[text.find('\n') - 1] = '1';
  auto crc_at = text.rfind("crc ");
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", masked_crc32c(text.data(), crc_at));
  text = text.substr(0, crc_at) + "crc " + hex + "\n";
  {
    std::ofstream out{manifest, std::ios::binary | std::ios::trunc};
    out << text;
  }
  try {
    store.latest();
    FAIL("latest() accepted a format-1 checkpoint");
  } catch (const std::runtime_error& e) {
    CHECK(std::string{e.what()}
          == manifest
               + ": a checkpoint of format 1, written by ActorFlow 0.1; this "
                 "ActorFlow reads format 2 only (resume it with ActorFlow "
                 "0.1, or start afresh with another checkpoint directory)");
  }
  CHECK(store.steps().empty());
  // A new job's checkpoints (keep 1) leave it where it is; the newest
  // checkpoint of this format is found first.
  store.write(sample(7));
  store.write(sample(9));
  CHECK(fs::exists(manifest));
  CHECK(!fs::exists(store.path_of(7)));
  auto back = store.latest();
  REQUIRE(back);
  require_equal(*back, sample(9));
}
