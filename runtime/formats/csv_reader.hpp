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

/// A CSV cell as a number, read the same way wherever ActorFlow reads CSV
/// (csv_source and `actorflow convert csv`): strtoll in base 10 for int64,
/// strtof for float (both skip leading whitespace and take a sign). False
/// when the cell is empty, has anything after the number, or is out of
/// range: an int64 beyond 64 bits, or a float whose magnitude is too large
/// for a float (one too small for a normal float reads as strtof rounds
/// it, down to 0).
bool parse_csv_int64(const std::string& cell, int64_t& out);
bool parse_csv_float(const std::string& cell, float& out);

} // namespace af
