// Reads TFRecord files (format: runtime/formats/tfrecord.hpp), plain or GZIP.
//
//   tfrecord_reader r;
//   if (auto err = r.open(path, {})) ...  // err.message names the file
//   std::string rec;
//   while (true) {
//     auto st = r.next(rec);
//     if (st == read_status::end) break;
//     if (st != read_status::ok) ... r.error() says what and where
//   }
//
// Plain files are memory-mapped (records are read where they lie); a plain
// file must not be truncated in place while a reader has it open (replacing
// it by rename is fine). GZIP files are read through zlib.
//
// Errors name the file and the byte offset of the record. A corrupt data
// CRC leaves the reader positioned on the next record (the caller may skip
// and go on); a corrupt length, a truncated record or an absurd length end
// the file (nothing after them can be trusted). A declared length is never
// allocated up front: one larger than max_record_bytes is refused, one
// beyond the end of a plain file is reported as truncated before reading,
// and payloads are read in bounded chunks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "actorflow/runtime/formats/tfrecord.hpp"

namespace af {

enum class read_status {
  ok,
  end,            // clean end of file
  corrupt_data,   // data CRC mismatch; next() may continue
  corrupt_length, // length CRC mismatch; the rest of the file is unusable
  truncated,      // the file ends inside a record (or its declared length)
  too_large,      // declared length beyond max_record_bytes
  io_error,       // read error, or not a valid gzip stream
};

/// Whether reading may go on after `s` (only a corrupt data CRC).
inline bool recoverable(read_status s) noexcept {
  return s == read_status::corrupt_data;
}

struct tfrecord_read_options {
  tfrecord::compression compression = tfrecord::compression::automatic;
  /// Records larger than this are refused (too_large). Default 1 GiB.
  uint64_t max_record_bytes = uint64_t{1} << 30;
  /// Check both CRCs of every record.
  bool verify_crc = true;
};

class tfrecord_reader {
public:
  tfrecord_reader();
  ~tfrecord_reader();
  tfrecord_reader(const tfrecord_reader&) = delete;
  tfrecord_reader& operator=(const tfrecord_reader&) = delete;

  /// Opens `path`; returns false and sets error() on failure.
  bool open(const std::string& path, const tfrecord_read_options& opts = {});
  /// Reads the next record into `out` (replacing its content).
  read_status next(std::string& out);
  /// The next record as a view, valid until the next call (no copy for
  /// plain files, which are memory-mapped).
  read_status next_view(std::string_view& out);
  /// Positions the reader at `offset` (a record boundary from offset(), in
  /// uncompressed bytes) and record number `index`, for restarts.
  bool seek(uint64_t offset, uint64_t index);

  /// Offset of the next record (after next(): of the one after it).
  uint64_t offset() const noexcept { return offset_; }
  /// Offset of the record last returned or failed.
  uint64_t record_offset() const noexcept { return record_offset_; }
  /// Records returned so far (the index of the next record).
  uint64_t index() const noexcept { return index_; }
  bool compressed() const noexcept;
  const std::string& path() const noexcept { return path_; }
  /// "FILE: offset N: what went wrong" for the last failure.
  const std::string& error() const noexcept { return error_; }

private:
  struct impl;
  read_status fail(read_status s, uint64_t at, const std::string& what);
  // Reads exactly n bytes; returns the number read (< n at end of file).
  size_t read_bytes(void* dst, size_t n);

  std::unique_ptr<impl> impl_;
  std::string path_;
  std::string error_;
  tfrecord_read_options opts_;
  uint64_t offset_ = 0;
  uint64_t record_offset_ = 0;
  uint64_t index_ = 0;
};

} // namespace af
