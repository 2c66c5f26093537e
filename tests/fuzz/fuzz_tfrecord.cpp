// libFuzzer target: the TFRecord reader on arbitrary file contents, both as
// a plain file and as whatever gzip makes of it. Every outcome must be a
// record or a located error; nothing may crash, hang or allocate wildly.
#include <cstdint>
#include <cstdio>
#include <string>
#include <unistd.h>

#include "actorflow/runtime/formats/tfrecord_reader.hpp"

namespace {

std::string scratch_file() {
  static std::string path = [] {
    char tmpl[] = "/tmp/af_fuzz_tfrecord_XXXXXX";
    int fd = ::mkstemp(tmpl);
    if (fd >= 0)
      ::close(fd);
    return std::string{tmpl};
  }();
  return path;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto path = scratch_file();
  if (auto* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(data, 1, size, f);
    std::fclose(f);
  }
  for (auto c : {af::tfrecord::compression::none,
                 af::tfrecord::compression::automatic}) {
    af::tfrecord_read_options opts;
    opts.compression = c;
    opts.max_record_bytes = 1 << 20;
    af::tfrecord_reader r;
    if (!r.open(path, opts))
      continue;
    std::string rec;
    for (int i = 0; i < 10000; ++i) {
      auto st = r.next(rec);
      if (st == af::read_status::end)
        break;
      if (st != af::read_status::ok) {
        if (r.error().empty())
          __builtin_trap();  // every failure must say what and where
        if (!af::recoverable(st))
          break;
      }
    }
  }
  return 0;
}
