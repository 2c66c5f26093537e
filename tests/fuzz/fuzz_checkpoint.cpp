// libFuzzer target: reading checkpoints (runtime/state/checkpoint.hpp:
// checkpoint_store::latest() and steps(), which parse MANIFEST and check
// the part files against it) on an arbitrary checkpoint directory.
//
// An input is a directory: sections separated by the line "@@@@", the
// first one MANIFEST, each other "<file name>\n<bytes>" (names with '/' or
// that are "." or ".." are dropped). It is tried as it is and again with
// the sizes and CRCs of the part lines and the manifest's crc line made
// right, so that the fuzzer gets past the CRCs. A checkpoint must be
// found complete, with every part as listed, or skipped, or (a MANIFEST of
// ActorFlow 0.1's format 1) refused with std::runtime_error; never a
// crash, another exception (there is no I/O error here) or a hang.
//
// AF_FUZZ_WRITE_SEEDS=DIR: writes real checkpoints, made with
// checkpoint_store::write, to DIR in this input format and exits
// (tests/fuzz/corpus/README.md).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/spdlog.h>

#include "actorflow/runtime/formats/crc32c.hpp"
#include "actorflow/runtime/job/job_part.hpp"
#include "actorflow/runtime/state/checkpoint.hpp"
#include "actorflow/runtime/state/state_io.hpp"
#include "tests/fuzz/fuzz_util.hpp"

namespace fs = std::filesystem;

namespace {

constexpr std::string_view separator = "\n@@@@\n";
constexpr uint64_t step = 7;

std::vector<std::string_view> split(std::string_view in) {
  std::vector<std::string_view> out;
  while (true) {
    auto at = in.find(separator);
    if (at == std::string_view::npos) {
      out.push_back(in);
      return out;
    }
    out.push_back(in.substr(0, at));
    in.remove_prefix(at + separator.size());
  }
}

std::string hex32(uint32_t x) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", x);
  return buf;
}

// The part lines' sizes and CRCs made those of the files given, and the
// crc line that of the bytes before it.
std::string fix(std::string_view manifest,
                const std::map<std::string, std::string_view>& files) {
  std::string out;
  size_t at = 0;
  while (at < manifest.size()) {
    auto nl = manifest.find('\n', at);
    auto end = nl == std::string_view::npos ? manifest.size() : nl;
    std::string line{manifest.substr(at, end - at)};
    at = end + 1;
    std::vector<std::string> w;
    size_t p = 0;
    while (p <= line.size()) {
      auto sp = std::min(line.find(' ', p), line.size());
      w.push_back(line.substr(p, sp - p));
      p = sp + 1;
    }
    if (w.size() == 5 && w[0] == "part") {
      if (auto it = files.find(w[1]); it != files.end()) {
        w[2] = std::to_string(it->second.size());
        w[3] = hex32(af::crc32c(it->second.data(), it->second.size()));
      }
      line = w[0] + " " + w[1] + " " + w[2] + " " + w[3] + " " + w[4];
    } else if (w.size() == 2 && w[0] == "crc") {
      line = "crc " + hex32(af::masked_crc32c(out.data(), out.size()));
    }
    out += line;
    if (end < manifest.size())
      out += '\n';
  }
  return out;
}

void check(const std::string& dir, const std::string& ckpt,
           std::string_view manifest,
           const std::map<std::string, std::string_view>& files) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(ckpt);
  af::fuzz::write_file(ckpt + "/MANIFEST", manifest);
  for (auto& [name, bytes] : files)
    af::fuzz::write_file(ckpt + "/" + name, bytes);
  af::checkpoint_store store{dir, 3};
  std::vector<uint64_t> steps;
  std::optional<af::checkpoint> c;
  try {
    steps = store.steps();
    c = store.latest();
  } catch (const std::runtime_error&) {
    if (!manifest.starts_with("actorflow-checkpoint 1\n"))
      __builtin_trap(); // only ActorFlow 0.1's checkpoints are refused
    return;
  }
  if (steps.size() > 1 || (!steps.empty() && steps[0] != step))
    __builtin_trap(); // there is one directory, of step 7
  if (!c)
    return;
  if (c->step != step || steps.empty())
    __builtin_trap(); // latest() verifies more than steps() does
  for (auto& part : c->parts) {
    auto file = af::checkpoint_store::file_name(part.name);
    auto it = files.find(file);
    if (part.name.empty() || it == files.end() || it->second != part.bytes)
      __builtin_trap(); // each part is its file's bytes
  }
}

void write_seeds(const std::string& out) {
  auto dir = af::fuzz::scratch_dir() + "/seeds";
  af::checkpoint_store store{dir, 3};
  std::vector<af::checkpoint> cs(3);
  cs[0].step = step; // no parts
  cs[1].step = step;
  // Parts framed as the job frames them (state frames), though only their
  // bytes matter here: the values are not a real shard's or trainer's.
  af::job_part job;
  job.topology = "demo";
  job.step = step;
  job.ended = {{"train[0]", false}};
  job.steps = {{"train[0]", step}};
  cs[1].parts = {{"job", af::format_job_part(job)},
                 {"ps[0]", af::save_state("ps_shard/2", std::string(40, 'p'))}};
  auto stage_part = [](const std::string& logic) {
    return af::save_state("stage/1", uint64_t{0}, std::vector<uint64_t>{0},
                          logic);
  };
  cs[2].step = step;
  cs[2].parts = {
    {"read[0]", stage_part(af::save_state("idx_source/2", uint64_t{0},
                                          uint64_t{0}, int64_t{96}))},
    {"a/../b %x", stage_part(std::string(300, 'z'))},
    {"trainer[1]", stage_part(std::string("\0\x01\x02", 3))}};
  const char* names[] = {"empty", "two_parts", "escaped_names"};
  for (size_t i = 0; i < cs.size(); ++i) {
    store.write(cs[i]);
    auto path = store.path_of(step);
    std::string input;
    auto read = [](const std::string& p) {
      std::string s;
      auto* f = std::fopen(p.c_str(), "rb");
      if (f == nullptr)
        std::abort();
      char buf[4096];
      size_t n;
      while ((n = std::fread(buf, 1, sizeof buf, f)) > 0)
        s.append(buf, n);
      std::fclose(f);
      return s;
    };
    input = read(path + "/MANIFEST");
    for (auto& p : cs[i].parts) {
      auto file = af::checkpoint_store::file_name(p.name);
      input += std::string{separator} + file + "\n" + read(path + "/" + file);
    }
    af::fuzz::write_file(out + "/" + names[i], input);
    auto back = store.latest(); // a seed must be complete
    if (!back || back->parts.size() != cs[i].parts.size())
      std::abort();
  }
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off); // latest() warns per skipped one
  return af::fuzz::write_seeds_or_fuzz(write_seeds);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = af::fuzz::scratch_dir() + "/store";
  static const std::string ckpt =
    af::checkpoint_store{dir}.path_of(step);
  auto sections =
    split(std::string_view{reinterpret_cast<const char*>(data), size});
  std::map<std::string, std::string_view> files;
  for (size_t i = 1; i < sections.size() && i <= 16; ++i) {
    auto s = sections[i];
    auto nl = s.find('\n');
    std::string name{s.substr(0, nl)};
    if (name.empty() || name == "." || name == ".." || name == "MANIFEST"
        || name.find('/') != std::string::npos || name.find('\0') != std::string::npos
        || name.size() > 200)
      continue;
    files[name] = nl == std::string_view::npos ? std::string_view{}
                                               : s.substr(nl + 1);
  }
  check(dir, ckpt, sections[0], files);
  auto fixed = fix(sections[0], files);
  if (fixed != sections[0])
    check(dir, ckpt, fixed, files);
  return 0;
}
