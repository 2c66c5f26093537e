// Helpers shared by the libFuzzer targets: a scratch file or directory of
// this process for parsers that only take paths, and the switch that makes
// a target write its seed corpus with the project's own writers.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <unistd.h>

namespace af::fuzz {

/// A path under /tmp of this process (made once, removed at exit).
inline const std::string& scratch_dir() {
  static std::string dir = [] {
    char tmpl[] = "/tmp/af_fuzz_XXXXXX";
    if (::mkdtemp(tmpl) == nullptr)
      std::abort();
    std::string d{tmpl};
    static struct remover {
      std::string d;
      ~remover() {
        std::error_code ec;
        std::filesystem::remove_all(d, ec);
      }
    } r{d};
    return d;
  }();
  return dir;
}

/// Writes `bytes` to `path` whole; aborts if it cannot (a broken harness
/// must not pass as a parser that rejects everything).
inline void write_file(const std::string& path, std::string_view bytes) {
  auto* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr)
    std::abort();
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f)
                          != bytes.size())
    std::abort();
  if (std::fclose(f) != 0)
    std::abort();
}

/// With AF_FUZZ_WRITE_SEEDS=DIR in the environment, a target that makes
/// its seeds with the project's own writers writes them to DIR and exits
/// (tests/fuzz/corpus/README.md).
inline const char* seed_dir() {
  return std::getenv("AF_FUZZ_WRITE_SEEDS");
}

/// What such a target's LLVMFuzzerInitialize does: with a seed directory
/// set, write_seeds(dir) and exit; otherwise return to fuzzing.
template <class F>
int write_seeds_or_fuzz(F write_seeds) {
  if (auto* dir = seed_dir()) {
    write_seeds(std::string{dir});
    std::exit(0);
  }
  return 0;
}

} // namespace af::fuzz
