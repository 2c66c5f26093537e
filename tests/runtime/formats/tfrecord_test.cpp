#include <catch2/catch.hpp>

#include <cstring>

#include <zlib.h>

#include "actorflow/runtime/formats/crc32c.hpp"
#include "actorflow/runtime/formats/tfrecord_reader.hpp"
#include "actorflow/runtime/formats/tfrecord_writer.hpp"
#include "tests/support/temp_dir.hpp"

using namespace af;
using af::test::temp_dir;

namespace {

// One record "hello", framed by hand; the CRCs were computed with a
// bit-by-bit CRC32C written independently of the library we use.
const unsigned char hello_record[] = {
  0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // length 5
  0xea, 0xb2, 0x04, 0x3e,                          // masked CRC of length
  'h',  'e',  'l',  'l',  'o',                     // data
  0xbb, 0x1f, 0x1c, 0x19,                          // masked CRC of data
};

std::string hello_bytes() {
  return std::string(reinterpret_cast<const char*>(hello_record),
                     sizeof hello_record);
}

std::vector<std::string> read_all(const std::string& path,
                                  read_status& last,
                                  tfrecord_read_options opts = {}) {
  tfrecord_reader r;
  REQUIRE(r.open(path, opts));
  std::vector<std::string> out;
  std::string rec;
  while ((last = r.next(rec)) == read_status::ok)
    out.push_back(rec);
  return out;
}

std::string write_records(const temp_dir& dir, const std::string& name,
                          const std::vector<std::string>& records,
                          tfrecord::compression c
                          = tfrecord::compression::none) {
  tfrecord_writer w;
  auto path = dir.file(name);
  REQUIRE(w.open(path, c));
  for (auto& r : records)
    REQUIRE(w.write(r));
  REQUIRE(w.close());
  return path;
}

} // namespace

TEST_CASE("crc32c matches the standard check value", "[tfrecord]") {
  CHECK(crc32c("123456789", 9) == 0xe3069283u);
  CHECK(crc32c("", 0) == 0u);
}

TEST_CASE("the writer produces exactly TensorFlow's framing", "[tfrecord]") {
  temp_dir dir;
  auto path = write_records(dir, "hello.tfrecord", {"hello"});
  CHECK(temp_dir::read(path) == hello_bytes());
  read_status st;
  auto back = read_all(dir.write("hand.tfrecord", hello_bytes()), st);
  CHECK(st == read_status::end);
  CHECK(back == std::vector<std::string>{"hello"});
}

TEST_CASE("records round-trip, plain and gzip, including empty and large",
          "[tfrecord]") {
  temp_dir dir;
  std::vector<std::string> records{"", "a", std::string(1 << 20, 'x'),
                                   std::string("\0\1\2", 3)};
  for (auto c : {tfrecord::compression::none, tfrecord::compression::gzip}) {
    auto path = write_records(dir, "r.tfrecord", records, c);
    read_status st;
    CHECK(read_all(path, st) == records);  // compression detected
    CHECK(st == read_status::end);
  }
}

TEST_CASE("a closed writer leaves no temporary file, an abandoned one "
          "leaves no file at all",
          "[tfrecord]") {
  temp_dir dir;
  {
    tfrecord_writer w;
    REQUIRE(w.open(dir.file("abandoned.tfrecord")));
    REQUIRE(w.write("x"));
  }
  CHECK(temp_dir::read(dir.file("abandoned.tfrecord")).empty());
  CHECK(temp_dir::read(dir.file("abandoned.tfrecord.tmp")).empty());
}

TEST_CASE("corrupt files give errors with file and offset, never a crash",
          "[tfrecord][bad-input]") {
  temp_dir dir;
  auto good = temp_dir::read(
    write_records(dir, "good.tfrecord", {"first", "second", "third"}));
  auto second = 12 + 5 + 4;  // offset of record 1
  read_status st;

  SECTION("zero-length file") {
    CHECK(read_all(dir.write("empty.tfrecord", ""), st).empty());
    CHECK(st == read_status::end);
  }
  SECTION("truncated tail") {
    auto path = dir.write("t.tfrecord", good.substr(0, good.size() - 3));
    tfrecord_reader r;
    REQUIRE(r.open(path));
    std::string rec;
    CHECK(r.next(rec) == read_status::ok);
    CHECK(r.next(rec) == read_status::ok);
    CHECK(r.next(rec) == read_status::truncated);
    CHECK_THAT(r.error(), Catch::Contains("t.tfrecord: offset 43:"));
  }
  SECTION("flipped byte in a payload: skippable") {
    auto bad = good;
    bad[second + 12 + 2] ^= 0x40;
    auto path = dir.write("p.tfrecord", bad);
    tfrecord_reader r;
    REQUIRE(r.open(path));
    std::string rec;
    CHECK(r.next(rec) == read_status::ok);
    CHECK(r.next(rec) == read_status::corrupt_data);
    CHECK_THAT(r.error(), Catch::Contains("offset 21: corrupt record data"));
    CHECK(r.next(rec) == read_status::ok);  // reading goes on
    CHECK(rec == "third");
  }
  SECTION("flipped byte in a length") {
    auto bad = good;
    bad[second] ^= 0x01;
    auto path = dir.write("l.tfrecord", bad);
    read_all(path, st);
    CHECK(st == read_status::corrupt_length);
  }
  SECTION("a length of 2^60 is refused, not allocated") {
    std::string rec(12, '\0');
    uint64_t len = uint64_t{1} << 60;
    std::memcpy(rec.data(), &len, 8);
    auto crc = masked_crc32c(rec.data(), 8);
    std::memcpy(rec.data() + 8, &crc, 4);
    auto path = dir.write("huge.tfrecord", rec + "tail");
    for (auto c : {tfrecord::compression::none, tfrecord::compression::gzip}) {
      auto p = path;
      if (c == tfrecord::compression::gzip) {
        p = dir.file("huge.tfrecord.gz");
        auto* gz = gzopen(p.c_str(), "wb");
        gzwrite(gz, rec.data(), static_cast<unsigned>(rec.size()));
        gzclose(gz);
      }
      tfrecord_reader r;
      REQUIRE(r.open(p));
      std::string out;
      CHECK(r.next(out) == read_status::too_large);
      CHECK_THAT(r.error(), Catch::Contains("1152921504606846976 bytes"));
    }
  }
  SECTION("a length beyond the end of a gzip file is truncated, with a "
          "bounded buffer") {
    std::string rec(12, '\0');
    uint64_t len = uint64_t{900} << 20;  // below the 1 GiB limit
    std::memcpy(rec.data(), &len, 8);
    auto crc = masked_crc32c(rec.data(), 8);
    std::memcpy(rec.data() + 8, &crc, 4);
    auto p = dir.file("lie.gz");
    auto* gz = gzopen(p.c_str(), "wb");
    gzwrite(gz, rec.data(), static_cast<unsigned>(rec.size()));
    gzwrite(gz, "short", 5);
    gzclose(gz);
    tfrecord_reader r;
    REQUIRE(r.open(p));
    std::string out;
    CHECK(r.next(out) == read_status::truncated);
    CHECK(out.capacity() <= (size_t{16} << 20) + 64);
  }
  SECTION("gzip garbage") {
    std::string magic("\x1f\x8b\x08\x00", 4);
    for (auto& garbage : {magic, magic + std::string(40, '\x5a'),
                          magic + "garbage that is not deflate data"}) {
      auto path = dir.write("g.tfrecord", garbage);
      tfrecord_reader r;
      REQUIRE(r.open(path));
      std::string out;
      auto got = r.next(out);
      CHECK(got != read_status::ok);
      CHECK(got != read_status::end);
      CHECK_THAT(r.error(), Catch::Contains("g.tfrecord: offset 0: "));
    }
  }
  SECTION("a truncated gzip file") {
    auto gz = temp_dir::read(write_records(dir, "z.tfrecord",
                                           {"first", "second", "third"},
                                           tfrecord::compression::gzip));
    auto path = dir.write("cut.tfrecord", gz.substr(0, gz.size() - 10));
    read_all(path, st);
    CHECK(st == read_status::io_error);
  }
  SECTION("missing file") {
    tfrecord_reader r;
    CHECK_FALSE(r.open(dir.file("nope.tfrecord")));
    CHECK_THAT(r.error(), Catch::Contains("nope.tfrecord: cannot open"));
  }
}

TEST_CASE("a reader restarted at a saved position continues exactly there",
          "[tfrecord]") {
  temp_dir dir;
  std::vector<std::string> records;
  for (int i = 0; i < 100; ++i)
    records.push_back("record " + std::to_string(i));
  for (auto c : {tfrecord::compression::none, tfrecord::compression::gzip}) {
    auto path = write_records(dir, "s.tfrecord", records, c);
    tfrecord_reader a;
    REQUIRE(a.open(path));
    std::string rec;
    for (int i = 0; i < 37; ++i)
      REQUIRE(a.next(rec) == read_status::ok);
    auto offset = a.offset();
    auto index = a.index();
    tfrecord_reader b;
    REQUIRE(b.open(path));
    REQUIRE(b.seek(offset, index));
    REQUIRE(b.next(rec) == read_status::ok);
    CHECK(rec == "record 37");
    CHECK(b.index() == 38);
  }
}
