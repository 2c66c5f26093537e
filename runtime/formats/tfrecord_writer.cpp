// Writes TFRecord files (format: runtime/formats/tfrecord.hpp), plain or
// GZIP. Declared in runtime/formats/tfrecord_writer.hpp.
#include "actorflow/runtime/formats/tfrecord_writer.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

#include <zlib.h>

#include "actorflow/runtime/formats/crc32c.hpp"

namespace af {

namespace {

void store_u64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    p[i] = static_cast<unsigned char>(v >> (8 * i));
}

void store_u32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    p[i] = static_cast<unsigned char>(v >> (8 * i));
}

} // namespace

struct tfrecord_writer::impl {
  std::string tmp;
  std::FILE* plain = nullptr;
  gzFile gz = nullptr;
  bool failed = false;

  ~impl() {
    if (plain != nullptr)
      std::fclose(plain);
    if (gz != nullptr)
      gzclose(gz);
    if (!tmp.empty())
      ::unlink(tmp.c_str());
  }
};

tfrecord_writer::tfrecord_writer() = default;
tfrecord_writer::~tfrecord_writer() = default;

bool tfrecord_writer::open(const std::string& path, tfrecord::compression c) {
  path_ = path;
  records_ = 0;
  error_.clear();
  impl_ = std::make_unique<impl>();
  impl_->tmp = path + ".tmp";
  if (c == tfrecord::compression::gzip) {
    impl_->gz = gzopen(impl_->tmp.c_str(), "wb6");
    if (impl_->gz == nullptr) {
      error_ = impl_->tmp + ": cannot create: " + std::strerror(errno);
      impl_->tmp.clear();
      return false;
    }
  } else {
    impl_->plain = std::fopen(impl_->tmp.c_str(), "wb");
    if (impl_->plain == nullptr) {
      error_ = impl_->tmp + ": cannot create: " + std::strerror(errno);
      impl_->tmp.clear();
      return false;
    }
  }
  return true;
}

bool tfrecord_writer::put(const void* data, size_t n) {
  if (n == 0)
    return true;
  bool ok = impl_->plain != nullptr
              ? std::fwrite(data, 1, n, impl_->plain) == n
              : gzwrite(impl_->gz, data, static_cast<unsigned>(n))
                  == static_cast<int>(n);
  if (!ok && !impl_->failed) {
    impl_->failed = true;
    error_ = path_ + ": write failed: " + std::strerror(errno);
  }
  return ok;
}

bool tfrecord_writer::write(std::string_view record) {
  if (!impl_ || impl_->failed)
    return false;
  unsigned char header[tfrecord::header_bytes];
  store_u64(header, record.size());
  store_u32(header + 8, masked_crc32c(header, 8));
  unsigned char footer[tfrecord::footer_bytes];
  store_u32(footer, masked_crc32c(record.data(), record.size()));
  // gzwrite takes an unsigned length: write huge records in pieces.
  bool ok = put(header, sizeof header);
  for (size_t at = 0; ok && at < record.size(); at += 1u << 30)
    ok = put(record.data() + at,
             std::min<size_t>(record.size() - at, size_t{1} << 30));
  ok = ok && put(footer, sizeof footer);
  if (ok)
    ++records_;
  return ok;
}

bool tfrecord_writer::close() {
  if (!impl_)
    return false;
  bool ok = !impl_->failed;
  if (impl_->plain != nullptr) {
    ok = std::fflush(impl_->plain) == 0 && ok;
    ok = ::fsync(fileno(impl_->plain)) == 0 && ok;
    ok = std::fclose(impl_->plain) == 0 && ok;
    impl_->plain = nullptr;
  } else if (impl_->gz != nullptr) {
    ok = gzclose(impl_->gz) == Z_OK && ok;
    impl_->gz = nullptr;
    int fd = ::open(impl_->tmp.c_str(), O_RDONLY);
    if (fd >= 0) {
      ok = ::fsync(fd) == 0 && ok;
      ::close(fd);
    }
  }
  if (ok && std::rename(impl_->tmp.c_str(), path_.c_str()) != 0)
    ok = false;
  if (!ok && error_.empty())
    error_ = path_ + ": cannot finish the file: " + std::strerror(errno);
  if (ok)
    impl_->tmp.clear();
  impl_.reset();
  return ok;
}

} // namespace af
