#include <catch2/catch.hpp>

#include <string>

#include "actorflow/runtime/formats/idx.hpp"
#include "tests/support/idx_file.hpp"
#include "tests/support/temp_dir.hpp"

using namespace af;
using af::test::idx_header;
using af::test::temp_dir;

TEST_CASE("the IDX reader reads rows of the header's shape", "[idx]") {
  temp_dir dir;
  auto path = dir.write("a.idx", idx_header({3, 2, 2}) + "abcdefghijkl");
  idx_reader r;
  REQUIRE(r.open(path));
  CHECK(r.rows() == 3);
  CHECK(r.row_shape() == std::vector<int64_t>{2, 2});
  tensor t;
  REQUIRE(r.read(2, t));
  CHECK(t.shape() == std::vector<int64_t>{2, 2, 2});
  CHECK(std::string(reinterpret_cast<const char*>(t.data()), 8) == "abcdefgh");
  REQUIRE(r.read(5, t));
  CHECK(t.shape()[0] == 1);
  REQUIRE(r.read(5, t));
  CHECK(t.shape()[0] == 0);
  CHECK_FALSE(r.seek(4));
  REQUIRE(r.seek(1));
  REQUIRE(r.read(1, t));
  CHECK(std::string(reinterpret_cast<const char*>(t.data()), 4) == "efgh");
}

// Found by fuzz_idx (tests/fuzz/corpus/idx/regress_row_bytes_overflow): a
// header whose dimensions multiply past int64 overflowed (UB), and one
// that promised huge rows made read() allocate them before reading.
TEST_CASE("the IDX reader refuses rows too large for it and does not "
          "allocate what the file does not hold",
          "[idx]") {
  temp_dir dir;
  idx_reader r;
  auto huge = dir.write("huge.idx", idx_header({1, 1u << 16, 1u << 16, 7}));
  CHECK_FALSE(r.open(huge));
  CHECK(r.error() == huge + ": offset 12: an IDX row of more than "
                            "1073741824 bytes (dimensions 1..2 of the "
                            "header) is not supported");
  // 512 MiB rows are allowed, but a file of 10 bytes of data gets an error
  // at its end, not a 1 GiB allocation.
  auto big = dir.write("big.idx", idx_header({2, 1u << 29}) + "0123456789");
  REQUIRE(r.open(big));
  tensor t;
  CHECK_FALSE(r.read(2, t));
  CHECK(r.error() == big + ": offset 22: file ends before its 2 rows "
                           "(header) are complete");
  auto bad_type = dir.write("type.idx", std::string{'\0', '\0', '\x0d', '\1'});
  CHECK_FALSE(r.open(bad_type));
  CHECK(r.error() == bad_type + ": offset 2: IDX type 0x0D is not supported "
                                "(only 0x08, unsigned bytes)");
}
