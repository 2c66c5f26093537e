// The IDX format of MNIST and Fashion-MNIST, plain or gzip-compressed:
//
//   uint8  0, 0
//   uint8  type     0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64
//   uint8  rank
//   uint32 dims[rank]   big-endian
//   data: dims[0] x ... x dims[rank-1] values, big-endian
//
// This reader supports type 0x08 (unsigned bytes), which is what MNIST and
// Fashion-MNIST use for both images and labels.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actorflow/runtime/core/tensor.hpp"

namespace af {

/// Larger rows (the product of dims[1..]) are refused by open(): a
/// header can promise any size, the file may not back it.
constexpr int64_t max_idx_row_bytes = int64_t{1} << 30;

class idx_reader {
public:
  idx_reader();
  ~idx_reader();
  idx_reader(const idx_reader&) = delete;
  idx_reader& operator=(const idx_reader&) = delete;

  /// Opens `path` (plain or gzip) and reads its header. False with error()
  /// (naming the file and offset) on a missing file, a bad magic, an
  /// unsupported type, a header cut short or rows over max_idx_row_bytes.
  bool open(const std::string& path);
  /// dims[0]: the number of rows (images or labels).
  int64_t rows() const noexcept { return dims_.empty() ? 0 : dims_[0]; }
  /// dims[1..]: the shape of one row.
  std::vector<int64_t> row_shape() const;
  /// Rows read so far.
  int64_t position() const noexcept { return position_; }
  /// Skips to row `row` (for restarts).
  bool seek(int64_t row);
  /// Reads up to `n` rows as a u8 tensor [k, row_shape...] (k = 0 at the
  /// end or for n <= 0). Returns false with error() if the file is shorter
  /// than its header says; memory is taken only as the file's bytes come.
  bool read(int64_t n, tensor& out);
  const std::string& error() const noexcept { return error_; }

private:
  struct impl;
  std::unique_ptr<impl> impl_;
  std::string path_;
  std::string error_;
  std::vector<int64_t> dims_;
  int64_t row_bytes_ = 0;
  int64_t position_ = 0;
};

} // namespace af
