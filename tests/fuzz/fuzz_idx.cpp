// libFuzzer target: the IDX reader (runtime/formats/idx.hpp) on arbitrary file
// contents, as a plain file and gzip-compressed. Opening, reading in
// batches to the end and seeking must give rows of the header's shape or
// an error naming the file and offset; never a crash, an exception, a
// hang or an allocation the file's bytes do not back.
#include <cstdint>
#include <string>
#include <vector>

#include <zlib.h>

#include "actorflow/runtime/formats/idx.hpp"
#include "tests/fuzz/fuzz_util.hpp"

namespace {

void check(const std::string& path) {
  af::idx_reader r;
  if (!r.open(path)) {
    if (r.error().compare(0, path.size() + 1, path + ":") != 0)
      __builtin_trap(); // every error names the file
    return;
  }
  auto shape = r.row_shape();
  int64_t got = 0;
  for (int i = 0; i < 1000; ++i) {
    af::tensor t;
    if (!r.read(7, t)) {
      if (r.error().empty())
        __builtin_trap();
      break;
    }
    if (t.shape().empty() || t.shape()[0] > 7
        || std::vector<int64_t>(t.shape().begin() + 1, t.shape().end())
             != shape)
      __builtin_trap(); // [k, row shape...]
    if (t.shape()[0] == 0)
      break;
    got += t.shape()[0];
    if (r.position() != got || got > r.rows())
      __builtin_trap();
  }
  for (int64_t row : {r.rows() / 2, r.rows(), int64_t{0}}) {
    if (!r.seek(row))
      continue;
    if (r.position() != row)
      __builtin_trap();
    af::tensor t;
    if (r.read(3, t) && t.shape()[0] > 3)
      __builtin_trap();
  }
  if (r.seek(r.rows() + 1) || r.seek(-1))
    __builtin_trap(); // past the end or before the start
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string plain = af::fuzz::scratch_dir() + "/input.idx";
  static const std::string gz = af::fuzz::scratch_dir() + "/input.idx.gz";
  af::fuzz::write_file(plain, {reinterpret_cast<const char*>(data), size});
  check(plain);
  gzFile f = gzopen(gz.c_str(), "wb1");
  if (f == nullptr)
    __builtin_trap();
  if (size > 0 && gzwrite(f, data, static_cast<unsigned>(size)) <= 0)
    __builtin_trap();
  gzclose(f);
  check(gz);
  return 0;
}
