// Checkpoints on disk: a directory of complete, CRC-protected snapshots, the
// newest `keep` of them kept. Declared in runtime/state/checkpoint.hpp.
#include "actorflow/runtime/state/checkpoint.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <utility>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "actorflow/runtime/formats/crc32c.hpp"

namespace af {

namespace {

constexpr std::string_view magic_line = "actorflow-checkpoint 2";
// ActorFlow 0.1 wrote format 1 (its parts are states of format 1 too,
// runtime/state/state_io.hpp): refused by name, and never removed.
constexpr std::string_view format_1_line = "actorflow-checkpoint 1";
const std::string format_1_refusal =
  "a checkpoint of format 1, written by ActorFlow 0.1; this ActorFlow reads "
  "format 2 only (resume it with ActorFlow 0.1, or start afresh with "
  "another checkpoint directory)";
constexpr std::string_view dir_prefix = "ckpt-";
constexpr size_t step_digits = 20;
constexpr std::string_view part_suffix = ".part";
constexpr std::string_view tmp_suffix = ".tmp";
constexpr size_t max_file_name = 240;
// A manifest is a line per part; anything this large is not one.
constexpr size_t max_manifest_bytes = size_t{16} << 20;

// --- names -----------------------------------------------------------------

bool kept_as_is(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')
         || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'
         || c == '[' || c == ']';
}

std::string escape(const std::string& name) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(name.size());
  for (unsigned char c : name) {
    if (kept_as_is(c)) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

// The inverse of escape(); false for text escape() cannot produce.
bool unescape(std::string_view s, std::string& out) {
  out.clear();
  for (size_t i = 0; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (kept_as_is(c)) {
      out += s[i];
      continue;
    }
    if (c != '%' || i + 2 >= s.size())
      return false;
    int hi = hex_digit(s[i + 1]);
    int lo = hex_digit(s[i + 2]);
    if (hi < 0 || lo < 0)
      return false;
    auto byte = static_cast<unsigned char>(hi * 16 + lo);
    if (kept_as_is(byte))
      return false; // escape() would have kept it
    out += static_cast<char>(byte);
    i += 2;
  }
  return !out.empty();
}

std::string step_name(uint64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%020llu",
                static_cast<unsigned long long>(step));
  return std::string{dir_prefix} + buf;
}

// The step of a directory entry named ckpt-<20 digits>.
std::optional<uint64_t> step_of(std::string_view name) {
  if (name.size() != dir_prefix.size() + step_digits
      || name.substr(0, dir_prefix.size()) != dir_prefix)
    return std::nullopt;
  uint64_t step = 0;
  for (char c : name.substr(dir_prefix.size())) {
    if (c < '0' || c > '9')
      return std::nullopt;
    auto d = static_cast<uint64_t>(c - '0');
    if (step > (UINT64_MAX - d) / 10)
      return std::nullopt;
    step = step * 10 + d;
  }
  return step;
}

std::string hex32(uint32_t x) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", x);
  return buf;
}

// --- files -----------------------------------------------------------------

[[noreturn]] void fail(const std::string& path, const char* what, int err) {
  throw std::runtime_error(path + ": " + what + ": " + std::strerror(err));
}

class fd_guard {
public:
  explicit fd_guard(int fd) : fd_(fd) {}
  ~fd_guard() {
    if (fd_ >= 0)
      ::close(fd_);
  }
  fd_guard(const fd_guard&) = delete;
  fd_guard& operator=(const fd_guard&) = delete;
  int get() const noexcept { return fd_; }
  // close() with its result: errors of delayed writes show up here.
  int close() {
    int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

private:
  int fd_;
};

void fsync_dir(const std::string& path) {
  fd_guard fd{::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (fd.get() < 0)
    fail(path, "cannot open the directory", errno);
  if (::fsync(fd.get()) != 0)
    fail(path, "cannot fsync the directory", errno);
}

// `bytes` to path.tmp, fsynced, renamed to path. The caller fsyncs the
// directory. Throws (and removes path.tmp) on any error.
void write_durably(const std::string& path, std::string_view bytes) {
  auto tmp = path + std::string{tmp_suffix};
  auto fail_tmp = [&](const char* what) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail(tmp, what, err);
  };
  fd_guard fd{
    ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  if (fd.get() < 0)
    fail(tmp, "cannot create", errno);
  size_t at = 0;
  while (at < bytes.size()) {
    auto n = ::write(fd.get(), bytes.data() + at, bytes.size() - at);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      fail_tmp(("write failed at offset " + std::to_string(at)).c_str());
    at += static_cast<size_t>(n);
  }
  if (::fsync(fd.get()) != 0)
    fail_tmp("cannot fsync");
  if (fd.close() != 0)
    fail_tmp("cannot close");
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    fail_tmp(("cannot rename to " + path).c_str());
}

enum class read_result { ok, missing, wrong_size };

// Reads the file at `path` whole into `out` if its size is `size` (or, with
// size = nullopt, at most `limit`). A missing file or another size is
// reported, not thrown; other errors throw. `actual` gets the size found.
read_result read_file(const std::string& path, std::optional<uint64_t> size,
                      uint64_t limit, bool read, std::string& out,
                      uint64_t& actual) {
  fd_guard fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.get() < 0) {
    if (errno == ENOENT || errno == ENOTDIR)
      return read_result::missing;
    fail(path, "cannot open", errno);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    fail(path, "cannot stat", errno);
  if (!S_ISREG(st.st_mode))
    return read_result::missing;
  actual = static_cast<uint64_t>(st.st_size);
  if (size ? actual != *size : actual > limit)
    return read_result::wrong_size;
  out.clear();
  if (!read)
    return read_result::ok;
  out.resize(static_cast<size_t>(actual));
  size_t at = 0;
  while (at < out.size()) {
    auto n = ::read(fd.get(), out.data() + at, out.size() - at);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      fail(path, ("read failed at offset " + std::to_string(at)).c_str(),
           errno);
    if (n == 0) { // shrank under us
      actual = at;
      return read_result::wrong_size;
    }
    at += static_cast<size_t>(n);
  }
  return read_result::ok;
}

// The checkpoint directories in `dir`, ascending by step. None if `dir`
// does not exist.
std::vector<std::pair<uint64_t, std::string>> list(const std::string& dir) {
  std::vector<std::pair<uint64_t, std::string>> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT || errno == ENOTDIR)
      return out;
    fail(dir, "cannot list", errno);
  }
  while (true) {
    errno = 0;
    auto* e = ::readdir(d);
    if (e == nullptr) {
      int err = errno;
      ::closedir(d);
      if (err != 0)
        fail(dir, "cannot list", err);
      break;
    }
    if (auto step = step_of(e->d_name))
      out.emplace_back(*step, dir + "/" + e->d_name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Makes the checkpoint directory at `path` incomplete, then removes it.
// Returns "" or what failed.
std::string remove_checkpoint(const std::string& path) {
  auto manifest = path + "/MANIFEST";
  if (::unlink(manifest.c_str()) != 0 && errno != ENOENT && errno != ENOTDIR)
    return manifest + ": cannot remove: " + std::strerror(errno);
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec)
    return path + ": cannot remove: " + ec.message();
  return {};
}

// --- the manifest ----------------------------------------------------------

struct manifest_entry {
  std::string name;
  std::string file;
  uint64_t size = 0;
  uint32_t crc = 0;
};

std::string render_manifest(const checkpoint& c,
                            const std::vector<std::string>& files) {
  std::string m{magic_line};
  m += "\nstep " + std::to_string(c.step) + "\nparts "
       + std::to_string(c.parts.size()) + "\n";
  for (size_t i = 0; i < c.parts.size(); ++i) {
    auto& p = c.parts[i];
    m += "part " + files[i] + " " + std::to_string(p.bytes.size()) + " "
         + hex32(crc32c(p.bytes.data(), p.bytes.size())) + " " + escape(p.name)
         + "\n";
  }
  m += "crc " + hex32(masked_crc32c(m.data(), m.size())) + "\n";
  return m;
}

bool parse_u64(std::string_view s, uint64_t& out) {
  if (s.empty() || s.size() > 20)
    return false;
  out = 0;
  for (char c : s) {
    if (c < '0' || c > '9')
      return false;
    auto d = static_cast<uint64_t>(c - '0');
    if (out > (UINT64_MAX - d) / 10)
      return false;
    out = out * 10 + d;
  }
  return true;
}

bool parse_hex32(std::string_view s, uint32_t& out) {
  if (s.size() != 8)
    return false;
  out = 0;
  for (char c : s) {
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                   : -1;
    if (d < 0)
      return false;
    out = out * 16 + static_cast<uint32_t>(d);
  }
  return true;
}

std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  size_t at = 0;
  while (at <= line.size()) {
    auto sp = line.find(' ', at);
    if (sp == std::string_view::npos)
      sp = line.size();
    out.push_back(line.substr(at, sp - at));
    at = sp + 1;
  }
  return out;
}

// Parses MANIFEST `text` (read from `path`) of the checkpoint of `step`.
// Returns "" or what is wrong, naming the path, line and offset.
std::string parse_manifest(const std::string& path, std::string_view text,
                           uint64_t step, std::vector<manifest_entry>& out) {
  out.clear();
  if (text.empty() || text.back() != '\n')
    return path + ": truncated (" + std::to_string(text.size())
           + " bytes, no final newline)";
  size_t at = 0;
  size_t line_no = 0;
  uint64_t count = 0;
  std::string err;
  auto bad = [&](size_t start, const std::string& what) {
    return path + ": line " + std::to_string(line_no) + " (offset "
           + std::to_string(start) + "): " + what;
  };
  while (at < text.size()) {
    auto start = at;
    auto nl = text.find('\n', at);
    auto line = text.substr(at, nl - at);
    at = nl + 1;
    ++line_no;
    auto w = words(line);
    if (line_no == 1) {
      if (line == format_1_line)
        return path + ": " + format_1_refusal;
      if (line != magic_line)
        return bad(start, "not a checkpoint manifest (expected \""
                            + std::string{magic_line} + "\")");
    } else if (line_no == 2) {
      uint64_t s = 0;
      if (w.size() != 2 || w[0] != "step" || !parse_u64(w[1], s))
        return bad(start, "expected \"step <number>\"");
      if (s != step)
        return bad(start, "step " + std::to_string(s)
                            + ", but the directory is of step "
                            + std::to_string(step));
    } else if (line_no == 3) {
      if (w.size() != 2 || w[0] != "parts" || !parse_u64(w[1], count))
        return bad(start, "expected \"parts <count>\"");
    } else if (line_no <= 3 + count) {
      manifest_entry e;
      if (w.size() != 5 || w[0] != "part" || !parse_u64(w[2], e.size)
          || !parse_hex32(w[3], e.crc))
        return bad(start, "expected \"part <file> <size> <crc> <name>\"");
      if (!unescape(w[4], e.name))
        return bad(start,
                   "badly escaped part name \"" + std::string{w[4]} + "\"");
      e.file = w[1];
      if (e.file != checkpoint_store::file_name(e.name))
        return bad(start, "file \"" + e.file + "\" is not the file of part \""
                            + e.name + "\"");
      for (auto& other : out)
        if (other.name == e.name)
          return bad(start, "part \"" + e.name + "\" listed twice");
      out.push_back(std::move(e));
    } else {
      uint32_t stored = 0;
      if (w.size() != 2 || w[0] != "crc" || !parse_hex32(w[1], stored))
        return bad(start, "expected \"crc <crc>\"");
      if (at != text.size())
        return bad(at, "bytes after the crc line");
      auto computed = masked_crc32c(text.data(), start);
      if (stored != computed)
        return bad(start, "the manifest's CRC is " + hex32(stored)
                            + ", its bytes give " + hex32(computed));
      return {};
    }
  }
  return path + ": truncated after line " + std::to_string(line_no)
         + " (no crc line)";
}

// Whether the checkpoint at `path` has a manifest of format 1 (its first
// line; nothing else is checked).
bool of_format_1(const std::string& path) {
  std::string text;
  uint64_t size = 0;
  if (read_file(path + "/MANIFEST", std::nullopt, max_manifest_bytes, true,
                text, size)
      != read_result::ok)
    return false;
  return text.compare(0, format_1_line.size() + 1,
                      std::string{format_1_line} + "\n")
         == 0;
}

// Checks the checkpoint at `path` (of `step`); with `c` set also reads its
// parts into it and checks their CRCs. Returns "" or what is wrong.
std::string verify(const std::string& path, uint64_t step, checkpoint* c) {
  auto manifest_path = path + "/MANIFEST";
  std::string text;
  uint64_t size = 0;
  switch (read_file(manifest_path, std::nullopt, max_manifest_bytes, true, text,
                    size)) {
    case read_result::missing:
      return manifest_path + ": missing (an incomplete checkpoint)";
    case read_result::wrong_size:
      return manifest_path + ": " + std::to_string(size)
             + " bytes, too large for a manifest";
    case read_result::ok:
      break;
  }
  std::vector<manifest_entry> entries;
  if (auto err = parse_manifest(manifest_path, text, step, entries);
      !err.empty())
    return err;
  if (c != nullptr) {
    c->step = step;
    c->parts.clear();
    c->parts.reserve(entries.size());
  }
  for (auto& e : entries) {
    auto file = path + "/" + e.file;
    std::string bytes;
    switch (read_file(file, e.size, 0, c != nullptr, bytes, size)) {
      case read_result::missing:
        return file + ": missing (listed in " + manifest_path + ")";
      case read_result::wrong_size:
        return file + ": " + std::to_string(size) + " bytes, the manifest says "
               + std::to_string(e.size);
      case read_result::ok:
        break;
    }
    if (c == nullptr)
      continue;
    auto crc = crc32c(bytes.data(), bytes.size());
    if (crc != e.crc)
      return file + ": CRC32C " + hex32(crc) + ", the manifest says "
             + hex32(e.crc);
    c->parts.push_back(checkpoint_part{e.name, std::move(bytes)});
  }
  return {};
}

} // namespace

// --- the store -------------------------------------------------------------

checkpoint_store::checkpoint_store(std::string dir, size_t keep)
  : dir_(std::move(dir)), keep_(keep) {
  if (dir_.empty())
    throw std::invalid_argument("checkpoint_store: no directory");
  if (keep_ == 0)
    throw std::invalid_argument("checkpoint_store " + dir_
                                + ": keep must be >= 1");
}

std::string checkpoint_store::file_name(const std::string& name) {
  if (name.empty())
    return {};
  auto f = escape(name) + std::string{part_suffix};
  return f.size() > max_file_name ? std::string{} : f;
}

std::string checkpoint_store::path_of(uint64_t step) const {
  return dir_ + "/" + step_name(step);
}

void checkpoint_store::write(const checkpoint& c) {
  std::vector<std::string> files;
  files.reserve(c.parts.size());
  for (auto& p : c.parts) {
    auto f = file_name(p.name);
    if (f.empty())
      throw std::invalid_argument(
        "checkpoint " + std::to_string(c.step) + ": part name \""
        + escape(p.name.substr(0, 40)) + (p.name.size() > 40 ? "...\" " : "\" ")
        + (p.name.empty() ? "is empty" : "is too long for a file name"));
    if (std::find(files.begin(), files.end(), f) != files.end())
      throw std::invalid_argument("checkpoint " + std::to_string(c.step)
                                  + ": two parts named \"" + escape(p.name)
                                  + "\"");
    files.push_back(std::move(f));
  }
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec)
    throw std::runtime_error(dir_ + ": cannot create: " + ec.message());
  auto path = path_of(c.step);
  // The checkpoint is made complete under a name that list() ignores
  // (ckpt-<step>.new: a crash's leftover of it is removed first), then
  // takes its step's name. A checkpoint of the same step already there (a
  // job without trainers cuts every checkpoint at step 0) is swapped out
  // atomically (renameat2's RENAME_EXCHANGE) and removed after: at every
  // moment the step's name holds a complete checkpoint, the old one or the
  // new one, so a crash while it is replaced leaves one.
  auto fresh = path + ".new";
  if (::access(fresh.c_str(), F_OK) == 0) {
    if (auto err = remove_checkpoint(fresh); !err.empty())
      throw std::runtime_error(err);
  }
  if (::mkdir(fresh.c_str(), 0755) != 0)
    fail(fresh, "cannot create", errno);
  fsync_dir(dir_);
  for (size_t i = 0; i < c.parts.size(); ++i)
    write_durably(fresh + "/" + files[i], c.parts[i].bytes);
  fsync_dir(fresh);
  write_durably(fresh + "/MANIFEST", render_manifest(c, files));
  fsync_dir(fresh);
  if (::renameat2(AT_FDCWD, fresh.c_str(), AT_FDCWD, path.c_str(),
                  RENAME_EXCHANGE)
      == 0) {
    // `fresh` now holds the replaced checkpoint.
    fsync_dir(dir_);
    if (auto err = remove_checkpoint(fresh); !err.empty())
      throw std::runtime_error(err);
  } else if (errno == ENOENT || errno == EINVAL || errno == ENOSYS) {
    // No checkpoint of this step yet; or a file system without
    // RENAME_EXCHANGE (EINVAL), where the old one goes first (its MANIFEST
    // first and durably) and a crash in between leaves none of this step.
    if (errno != ENOENT && ::access(path.c_str(), F_OK) == 0)
      if (auto err = remove_checkpoint(path); !err.empty())
        throw std::runtime_error(err);
    if (::rename(fresh.c_str(), path.c_str()) != 0)
      fail(path, "cannot rename the new checkpoint to", errno);
  } else {
    fail(path, "cannot replace with the new checkpoint", errno);
  }
  fsync_dir(dir_);

  // Retention: the newest `keep` complete ones at or below c.step stay.
  size_t kept = 0;
  auto all = list(dir_);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    auto& [step, p] = *it;
    bool keep_it = step <= c.step && kept < keep_
                   && (step == c.step || verify(p, step, nullptr).empty());
    if (keep_it) {
      ++kept;
      continue;
    }
    if (of_format_1(p)) // not ours to remove: an older ActorFlow's
      continue;
    spdlog::debug("{}: removing checkpoint {}", dir_, p);
    if (auto err = remove_checkpoint(p); !err.empty())
      spdlog::warn("{} (checkpoint {} was written)", err, c.step);
  }
}

std::optional<checkpoint> checkpoint_store::latest() const {
  auto all = list(dir_);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    checkpoint c;
    auto err = verify(it->second, it->first, &c);
    if (err.empty())
      return c;
    if (of_format_1(it->second))
      throw std::runtime_error(err);
    spdlog::warn("checkpoint {} skipped: {}", it->first, err);
  }
  return std::nullopt;
}

std::optional<checkpoint> checkpoint_store::read(uint64_t step,
                                                 std::string& why) const {
  checkpoint c;
  why = verify(path_of(step), step, &c);
  if (!why.empty())
    return std::nullopt;
  return c;
}

std::vector<uint64_t> checkpoint_store::steps() const {
  std::vector<uint64_t> out;
  for (auto& [step, path] : list(dir_))
    if (verify(path, step, nullptr).empty())
      out.push_back(step);
  return out;
}

} // namespace af
