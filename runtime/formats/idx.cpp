// The IDX format of MNIST and Fashion-MNIST, plain or gzip-compressed:
// opening, reading rows and seeking. Declared in runtime/formats/idx.hpp.
#include "actorflow/runtime/formats/idx.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
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
    char type[8];
    std::snprintf(type, sizeof type, "0x%02X", head[2]);
    error_ = path + ": offset 2: IDX type " + type
             + " is not supported (only 0x08, unsigned bytes)";
    return false;
  }
  int rank = head[3];
  if (rank < 1) {
    error_ = path + ": offset 3: IDX rank 0";
    return false;
  }
  row_bytes_ = 1;
  // The row's dimensions other than 0: bounded as well, so that a tensor
  // of rows has an element count that fits (a 0 makes row_bytes_ 0 and
  // would let any dimension after it through: found by fuzz_idx).
  int64_t nonzero = 1;
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
    if (i > 0 && dim > 0 && nonzero > max_idx_row_bytes / dim) {
      // Checked as the header is read: the product cannot overflow.
      error_ = path + ": offset " + std::to_string(4 + 4 * i)
               + ": an IDX row of more than "
               + std::to_string(max_idx_row_bytes)
               + " bytes (dimensions 1.." + std::to_string(i)
               + " of the header) is not supported";
      dims_.clear();
      return false;
    }
    if (i > 0)
      row_bytes_ *= dim;
    if (i > 0 && dim > 0)
      nonzero *= dim;
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
  auto k = std::max<int64_t>(0, std::min(n, rows() - position_));
  auto shape = row_shape();
  shape.insert(shape.begin(), k);
  auto bytes = static_cast<size_t>(k * row_bytes_);
  // Up to this much is read straight into the tensor; more (a header
  // may promise rows of any size) is read into a buffer that at most
  // doubles per step, so that memory is only taken for bytes the file
  // really has, and then copied.
  constexpr size_t direct = size_t{1} << 20;
  std::vector<unsigned char> staged;
  if (bytes <= direct)
    out = tensor::allocate(dtype::u8, shape);
  size_t done = 0;
  while (done < bytes) {
    unsigned char* to = nullptr;
    size_t room = bytes - done;
    if (bytes <= direct) {
      to = out.mutable_data_as<unsigned char>() + done;
    } else {
      room = std::min(room, std::max(direct, done));
      staged.resize(done + room);
      to = staged.data() + done;
    }
    auto want = static_cast<unsigned>(std::min<size_t>(room, 1u << 30));
    int got = gzread(impl_->gz, to, want);
    if (got <= 0) {
      auto header = 4 + 4 * static_cast<int64_t>(dims_.size());
      error_ = path_ + ": offset "
               + std::to_string(header + position_ * row_bytes_
                                + static_cast<int64_t>(done))
               + ": file ends before its " + std::to_string(rows())
               + " rows (header) are complete";
      out = tensor{};
      return false;
    }
    done += static_cast<size_t>(got);
  }
  if (bytes > direct) {
    out = tensor::allocate(dtype::u8, shape);
    std::memcpy(out.mutable_data(), staged.data(), bytes);
  }
  position_ += k;
  return true;
}

} // namespace af
