// record_id_log: the file in which a trainer (or a sink) lists the records
// it consumed, by id, so that a test or an audit can check which records
// were trained: ids, not counts. Declared in actors/sinks/record_id_log.hpp.
#include "actorflow/actors/sinks/record_id_log.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include <fcntl.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "actorflow/runtime/stage/stage.hpp"

namespace af {

namespace {

constexpr const char* placeholder = "{replica}";

std::string substitute(std::string path, uint32_t replica) {
  auto at = path.find(placeholder);
  if (at != std::string::npos)
    path.replace(at, std::strlen(placeholder), std::to_string(replica));
  return path;
}

void append_number(std::string& out, uint64_t v) {
  char digits[24];
  auto [end, ec] = std::to_chars(digits, digits + sizeof digits, v);
  out.append(digits, end);
}

void append_number(std::string& out, int64_t v) {
  char digits[24];
  auto [end, ec] = std::to_chars(digits, digits + sizeof digits, v);
  out.append(digits, end);
}

} // namespace

record_id_log::record_id_log(const std::string& path, std::string field,
                             uint32_t replica, std::string label)
  : path_(substitute(path, replica)), field_(std::move(field)),
    label_(std::move(label)) {
}

record_id_log::~record_id_log() {
  if (fd_ >= 0)
    ::close(fd_);
}

std::string record_id_log::check(const std::string& path, int64_t replicas) {
  if (replicas > 1 && path.find(placeholder) == std::string::npos)
    return "record_ids \"" + path + "\" needs \"{replica}\" in it: the "
           + std::to_string(replicas) + " replicas each write their own file";
  return {};
}

void record_id_log::take(const batch& b, std::vector<int64_t>& out) const {
  auto* t = b.find(field_);
  auto n = b.records();
  if (t == nullptr)
    throw input_error("record_ids: the batch has no field '" + field_
                      + "' (the record ids; readers add 'index')");
  if (t->rows() != n || t->elements() != n
      || (t->type() != dtype::i64 && t->type() != dtype::i32))
    throw input_error("record_ids: field '" + field_
                      + "' must hold one i64 or i32 per record ("
                      + std::to_string(n) + "), got "
                      + dtype_name(t->type()) + " with "
                      + std::to_string(t->elements()) + " values");
  out.resize(static_cast<size_t>(n));
  if (t->type() == dtype::i64)
    std::memcpy(out.data(), t->data(), static_cast<size_t>(n) * 8);
  else
    for (int64_t i = 0; i < n; ++i)
      out[static_cast<size_t>(i)] = t->data_as<int32_t>()[i];
}

void record_id_log::open(bool truncate) {
  int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC;
  if (truncate)
    flags |= O_TRUNC;
  fd_ = ::open(path_.c_str(), flags, 0644);
  if (fd_ < 0)
    throw std::runtime_error(path_ + ": cannot open for the record ids: "
                             + std::strerror(errno));
}

void record_id_log::write(uint64_t step, uint64_t epoch,
                          const std::vector<int64_t>& ids) {
  if (fd_ < 0)
    open(true);
  line_.clear();
  for (auto id : ids) {
    append_number(line_, step);
    line_ += ' ';
    append_number(line_, epoch);
    line_ += ' ';
    append_number(line_, id);
    line_ += '\n';
  }
  // One write(2) per step (O_APPEND): a kill leaves whole steps.
  const char* p = line_.data();
  size_t left = line_.size();
  while (left > 0) {
    auto n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      throw std::runtime_error(path_ + ": cannot write the record ids: "
                               + std::strerror(errno));
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void record_id_log::restore(uint64_t step, const char* whose) {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  std::ifstream in(path_, std::ios::binary);
  if (!in) {
    spdlog::warn("{}: record ids: {} is missing, so the records trained "
                 "up to {} step {} are not listed in it",
                 label_, path_, whose, step);
    open(true);
    return;
  }
  // Lines are in step order: keep everything before the first line of a
  // later step (or a damaged line).
  uint64_t kept = 0, cut = 0, last_step = 0;
  std::streamoff keep_bytes = 0;
  bool cutting = false;
  std::string line;
  std::streamoff pos = 0;
  while (std::getline(in, line)) {
    auto next = pos + static_cast<std::streamoff>(line.size()) + 1;
    uint64_t s = 0;
    auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), s);
    bool whole = !in.eof() && ec == std::errc{} && end != line.data();
    if (!cutting && whole && s <= step) {
      ++kept;
      keep_bytes = next;
    } else {
      cutting = true;
      if (whole) {
        ++cut;
        last_step = std::max(last_step, s);
      }
    }
    pos = next;
  }
  in.close();
  if (::truncate(path_.c_str(), keep_bytes) != 0)
    throw std::runtime_error(path_ + ": cannot cut the record ids after step "
                             + std::to_string(step) + ": "
                             + std::strerror(errno));
  if (cut > 0)
    spdlog::info("{}: record ids: {} keeps the {} records of steps up to {} "
                 "({}); cut {} records of steps {} to {}, "
                 "trained after it (they come again)",
                 label_, path_, kept, step, whose, cut, step + 1, last_step);
  else
    spdlog::info("{}: record ids: {} keeps the {} records of steps up to {} "
                 "({})",
                 label_, path_, kept, step, whose);
  open(false);
}

void record_id_log::close() {
  if (closed_)
    return;
  if (fd_ < 0)
    open(true);
  ::close(fd_);
  fd_ = -1;
  closed_ = true;
}

} // namespace af
