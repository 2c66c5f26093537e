// Writes TFRecord files (format: runtime/formats/tfrecord.hpp), plain or GZIP.
// The file appears under its name only when close() succeeds: it is written
// to "<path>.tmp", flushed, fsynced and renamed, so a crash never leaves a
// half-written file that looks complete.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "actorflow/runtime/formats/tfrecord.hpp"

namespace af {

class tfrecord_writer {
public:
  tfrecord_writer();
  ~tfrecord_writer();  // discards the temporary file unless closed
  tfrecord_writer(const tfrecord_writer&) = delete;
  tfrecord_writer& operator=(const tfrecord_writer&) = delete;

  /// Starts `path`. compression::automatic is treated as none.
  bool open(const std::string& path,
            tfrecord::compression c = tfrecord::compression::none);
  bool write(std::string_view record);
  /// Finishes the file; false (with error()) if anything failed.
  bool close();

  uint64_t records() const noexcept { return records_; }
  const std::string& error() const noexcept { return error_; }

private:
  struct impl;
  bool put(const void* data, size_t n);

  std::unique_ptr<impl> impl_;
  std::string path_;
  std::string error_;
  uint64_t records_ = 0;
};

} // namespace af
