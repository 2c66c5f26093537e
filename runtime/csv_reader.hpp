// Reads CSV files row by row (RFC 4180: quoted fields, doubled quotes,
// newlines inside quotes) with libcsv, in strict mode. Each row comes with
// the line it starts on, so that callers can name it in errors.
#pragma once

#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace af {

class csv_reader {
public:
  csv_reader();
  ~csv_reader();
  csv_reader(const csv_reader&) = delete;
  csv_reader& operator=(const csv_reader&) = delete;

  /// Opens `path`; false with error() if it cannot be read.
  bool open(const std::string& path, char delimiter = ',');
  /// The next row; false at the end or on a malformed file (error() then
  /// says where). `line` is the 1-based line the row starts on.
  bool next(std::vector<std::string>& fields, int64_t& line);
  const std::string& error() const noexcept { return error_; }
  const std::string& path() const noexcept { return path_; }

private:
  struct impl;
  bool feed_more();

  std::unique_ptr<impl> impl_;
  std::string path_;
  std::string error_;
};

} // namespace af
