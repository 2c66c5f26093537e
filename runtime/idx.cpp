#include "runtime/idx.hpp"

#include <cerrno>
#include <cstring>

#include <zlib.h>

namespace af {

struct idx_reader::impl {
  gzFile gz = nullptr;
  ~impl() {
    if (gz != nullptr)
      gzclose(gz);
  }
};

idx_reader::idx_reader() = default;
idx_reader::~idx_reader() = default;

bool idx_reader::open(const std::string& path) {
  path_ = path;
  impl_ = std::make_unique<impl>();
  dims_.clear();
  position_ = 0;
  // gzread reads plain files unchanged, so one path serves both.
  impl_->gz = gzopen(path.c_str(), "rb");
  if (impl_->gz == nullptr) {
    error_ = path + ": cannot open: " + std::strerror(errno);
    return false;
  }
  unsigned char head[4];
  if (gzread(impl_->gz, head, 4) != 4 || head[0] != 0 || head[1] != 0) {
    error_ = path + ": offset 0: not an IDX file (bad magic)";
    return false;
  }
  if (head[2] != 0x08) {
    error_ = path + ": offset 2: IDX type 0x"
             + std::to_string(static_cast<int>(head[2]))
             + " is not supported (only 0x08, unsigned bytes)";
    return false;
  }
  int rank = head[3];
  if (rank < 1) {
    error_ = path + ": offset 3: IDX rank 0";
    return false;
  }
  row_bytes_ = 1;
  for (int i = 0; i < rank; ++i) {
    unsigned char d[4];
    if (gzread(impl_->gz, d, 4) != 4) {
      error_ = path + ": offset " + std::to_string(4 + 4 * i)
               + ": file ends inside the IDX header";
      return false;
    }
    int64_t dim = (int64_t{d[0]} << 24) | (int64_t{d[1]} << 16)
                  | (int64_t{d[2]} << 8) | int64_t{d[3]};
    dims_.push_back(dim);
    if (i > 0)
      row_bytes_ *= dim;
  }
  return true;
}

std::vector<int64_t> idx_reader::row_shape() const {
  return dims_.size() > 1 ? std::vector<int64_t>(dims_.begin() + 1, dims_.end())
                          : std::vector<int64_t>{};
}

bool idx_reader::seek(int64_t row) {
  auto header = 4 + 4 * static_cast<int64_t>(dims_.size());
  auto at = header + row * row_bytes_;
  if (row < 0 || row > rows()
      || gzseek(impl_->gz, static_cast<z_off_t>(at), SEEK_SET) != at) {
    error_ = path_ + ": cannot seek to row " + std::to_string(row);
    return false;
  }
  position_ = row;
  return true;
}

bool idx_reader::read(int64_t n, tensor& out) {
  auto k = std::min(n, rows() - position_);
  auto shape = row_shape();
  shape.insert(shape.begin(), k);
  out = tensor::allocate(dtype::u8, shape);
  auto bytes = static_cast<size_t>(k * row_bytes_);
  size_t done = 0;
  while (done < bytes) {
    auto want = static_cast<unsigned>(std::min<size_t>(bytes - done, 1u << 30));
    int got = gzread(impl_->gz, out.mutable_data() + done, want);
    if (got <= 0) {
      auto header = 4 + 4 * static_cast<int64_t>(dims_.size());
      error_ = path_ + ": offset "
               + std::to_string(header + position_ * row_bytes_
                                + static_cast<int64_t>(done))
               + ": file ends before its " + std::to_string(rows())
               + " rows (header) are complete";
      return false;
    }
    done += static_cast<size_t>(got);
  }
  position_ += k;
  return true;
}

} // namespace af
