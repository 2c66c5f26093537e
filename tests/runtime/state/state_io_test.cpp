// The state frame of checkpoint parts (runtime/state/state_io.hpp): values come
// back as written; another tag, a flipped byte, a truncated frame, a frame
// of another format and a state as ActorFlow 0.1 wrote it are refused with
// a message that says which.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "actorflow/runtime/formats/crc32c.hpp"
#include "actorflow/runtime/state/state_io.hpp"

namespace {

std::string refusal(const std::string& bytes, const std::string& tag) {
  uint64_t a = 0;
  std::string b;
  try {
    af::load_state(bytes, tag, a, b);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

} // namespace

TEST_CASE("a state frame gives back the values saved under its tag",
          "[state_io]") {
  std::vector<float> xs{1.5f, -2.0f, 3.25f};
  auto bytes = af::save_state("thing/2", uint64_t{42}, std::string{"abc"}, xs);
  CHECK(af::state_tag(bytes) == "thing/2");
  uint64_t n = 0;
  std::string s;
  std::vector<float> ys;
  af::load_state(bytes, "thing/2", n, s, ys);
  CHECK(n == 42);
  CHECK(s == "abc");
  CHECK(ys == xs);
  // The frame starts with the magic and the format version (big-endian).
  REQUIRE(bytes.size() > 6);
  CHECK(bytes.substr(0, 4) == "AFST");
  CHECK(static_cast<uint8_t>(bytes[4]) == 0);
  CHECK(static_cast<uint8_t>(bytes[5]) == af::state_format);
}

TEST_CASE("a frame built from a head and a tail, and a sized state, are "
          "the frame save_state writes",
          "[state_io]") {
  // A stage's state around its logic's snapshot (stage_checkpoint.cpp):
  // the values before the string and the string's length, then its bytes.
  std::string big(100000, 'x');
  for (size_t i = 0; i < big.size(); ++i)
    big[i] = static_cast<char>(i * 7);
  std::vector<uint64_t> ended{3, 4};
  auto whole = af::save_state("stage/1", uint64_t{2}, ended, big);
  std::vector<char> head;
  caf::binary_serializer sink{nullptr, head};
  uint64_t forwarded = 2;
  auto size = big.size();
  REQUIRE_FALSE(sink(forwarded, ended));
  REQUIRE_FALSE(sink.begin_sequence(size));
  CHECK(af::frame_state("stage/1", head, big) == whole);
  CHECK(af::save_sized_state(big.size() + 64, "stage/1", uint64_t{2}, ended,
                             big)
        == whole);
  // The CRC of the two parts is the CRC of both in one.
  CHECK(af::crc32c_extend(af::crc32c(big.data(), 1000), big.data() + 1000,
                          big.size() - 1000)
        == af::crc32c(big.data(), big.size()));
  CHECK(af::crc32c_extend(af::crc32c(big.data(), big.size()), nullptr, 0)
        == af::crc32c(big.data(), big.size()));
}

TEST_CASE("a state frame is refused under another tag, damaged, truncated "
          "or of another format",
          "[state_io]") {
  auto bytes = af::save_state("thing/2", uint64_t{7}, std::string{"payload"});
  CHECK(refusal(bytes, "thing/2") == "(accepted)");
  CHECK(refusal(bytes, "other/2") == "not a other/2 state (a thing/2 state)");
  auto flipped = bytes;
  flipped.back() = static_cast<char>(flipped.back() ^ 0x20);
  CHECK(refusal(flipped, "thing/2")
        == "a damaged thing/2 state: its CRC does not match (16 bytes of "
           "values)");
  for (size_t n : {size_t{0}, size_t{3}, size_t{8}, bytes.size() - 1})
    CHECK(refusal(bytes.substr(0, n), "thing/2").find("thing/2 state")
          != std::string::npos);
  CHECK(refusal(bytes.substr(0, bytes.size() - 1), "thing/2")
        == "a damaged thing/2 state: its frame is truncated ("
             + std::to_string(bytes.size() - 1) + " bytes)");
  auto longer = bytes + "x";
  CHECK(refusal(longer, "thing/2").find("damaged") != std::string::npos);
  auto format3 = bytes;
  format3[5] = 3;
  CHECK(refusal(format3, "thing/2")
        == "a thing/2 state of format 3; this ActorFlow reads format 2");
  CHECK(af::state_tag(format3).empty());
}

TEST_CASE("states as ActorFlow 0.1 wrote them are refused naming the "
          "version",
          "[state_io]") {
  // 0.1: the tag and the values through CAF's serializer, no frame; and
  // readers' text states.
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  std::string tag = "stage/1";
  uint64_t forwarded = 3;
  REQUIRE(!sink(tag, forwarded));
  std::string old(buf.begin(), buf.end());
  for (auto& s : {old, std::string{"idx1 0 128"}}) {
    auto why = refusal(s, "stage/2");
    CHECK(why.find("not a stage/2 state") == 0);
    CHECK(why.find("ActorFlow 0.1") != std::string::npos);
    CHECK(af::state_tag(s).empty());
  }
}
