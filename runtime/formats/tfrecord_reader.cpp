// Reads TFRecord files (format: runtime/formats/tfrecord.hpp), plain or
// GZIP. Declared in runtime/formats/tfrecord_reader.hpp.
#include "actorflow/runtime/formats/tfrecord_reader.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sys/mman.h>
#include <sys/stat.h>

#include <zlib.h>

#include "actorflow/runtime/formats/crc32c.hpp"

namespace af::tfrecord {

bool parse_compression(const std::string& name, compression& out) {
  if (name.empty() || name == "none")
    out = compression::none;
  else if (name == "gzip")
    out = compression::gzip;
  else if (name == "auto")
    out = compression::automatic;
  else
    return false;
  return true;
}

const char* to_string(compression c) noexcept {
  switch (c) {
    case compression::none:
      return "none";
    case compression::gzip:
      return "gzip";
    case compression::automatic:
      return "auto";
  }
  return "?";
}

} // namespace af::tfrecord

namespace af {

namespace {

// Payloads are read in chunks of at most this size, so that a length field
// that lies costs at most one chunk of memory before the truth comes out.
constexpr size_t read_chunk = size_t{16} << 20;

uint64_t load_u64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | p[i];
  return v;
}

uint32_t load_u32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8)
         | (static_cast<uint32_t>(p[2]) << 16)
         | (static_cast<uint32_t>(p[3]) << 24);
}

} // namespace

// Plain files are mapped into memory: records are read where they lie,
// with no read() copies, and handed out as views (next_view). GZIP files go
// through zlib into `buf`.
struct tfrecord_reader::impl {
  bool plain = false;
  const char* map = nullptr;
  uint64_t file_size = 0;  // plain files only
  gzFile gz = nullptr;
  bool read_failed = false;
  std::string buf;

  ~impl() {
    if (map != nullptr)
      ::munmap(const_cast<char*>(map), file_size);
    if (gz != nullptr)
      gzclose(gz);
  }
};

tfrecord_reader::tfrecord_reader() = default;
tfrecord_reader::~tfrecord_reader() = default;

bool tfrecord_reader::compressed() const noexcept {
  return impl_ && impl_->gz != nullptr;
}

bool tfrecord_reader::open(const std::string& path,
                           const tfrecord_read_options& opts) {
  path_ = path;
  opts_ = opts;
  offset_ = record_offset_ = index_ = 0;
  error_.clear();
  impl_ = std::make_unique<impl>();
  auto* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    error_ = path + ": cannot open: " + std::strerror(errno);
    return false;
  }
  struct stat info {};
  if (::fstat(fileno(f), &info) == 0 && S_ISDIR(info.st_mode)) {
    std::fclose(f);
    error_ = path + ": is a directory";
    return false;
  }
  auto c = opts.compression;
  if (c == tfrecord::compression::automatic) {
    unsigned char magic[2] = {0, 0};
    auto n = std::fread(magic, 1, 2, f);
    c = n == 2 && magic[0] == 0x1f && magic[1] == 0x8b
          ? tfrecord::compression::gzip
          : tfrecord::compression::none;
    std::rewind(f);
  }
  if (c == tfrecord::compression::gzip) {
    int fd = ::dup(fileno(f));
    std::fclose(f);
    impl_->gz = fd >= 0 ? gzdopen(fd, "rb") : nullptr;
    if (impl_->gz == nullptr) {
      error_ = path + ": cannot open as gzip";
      return false;
    }
    gzbuffer(impl_->gz, 256 * 1024);
  } else {
    impl_->plain = true;
    impl_->file_size = static_cast<uint64_t>(info.st_size);
    if (impl_->file_size > 0) {
      void* m = ::mmap(nullptr, impl_->file_size, PROT_READ, MAP_PRIVATE,
                       fileno(f), 0);
      if (m == MAP_FAILED) {
        error_ = path + ": cannot map: " + std::strerror(errno);
        std::fclose(f);
        return false;
      }
      ::madvise(m, impl_->file_size, MADV_SEQUENTIAL);
      impl_->map = static_cast<const char*>(m);
    }
    std::fclose(f);  // the mapping stays valid
  }
  return true;
}

size_t tfrecord_reader::read_bytes(void* dst, size_t n) {
  if (impl_->plain) {
    auto got = static_cast<size_t>(
      std::min<uint64_t>(n, impl_->file_size - std::min(offset_,
                                                        impl_->file_size)));
    if (got > 0)
      std::memcpy(dst, impl_->map + offset_, got);
    offset_ += got;
    return got;
  }
  size_t total = 0;
  auto* p = static_cast<char*>(dst);
  while (total < n) {
    auto want = static_cast<unsigned>(std::min<size_t>(n - total, 1u << 30));
    int got = gzread(impl_->gz, p + total, want);
    if (got <= 0) {
      // End of data, or a broken stream that zlib reports only here.
      int code = Z_OK;
      gzerror(impl_->gz, &code);
      if (got < 0 || code != Z_OK)
        impl_->read_failed = true;
      break;
    }
    total += static_cast<size_t>(got);
  }
  offset_ += total;
  return total;
}

read_status tfrecord_reader::fail(read_status s, uint64_t at,
                                  const std::string& what) {
  error_ = path_ + ": offset " + std::to_string(at) + ": " + what;
  return s;
}

read_status tfrecord_reader::next(std::string& out) {
  std::string_view view;
  auto st = next_view(view);
  out.assign(view);
  return st;
}

read_status tfrecord_reader::next_view(std::string_view& out) {
  out = {};
  if (!impl_ || (!impl_->plain && impl_->gz == nullptr))
    return fail(read_status::io_error, offset_, "not open");
  record_offset_ = offset_;
  unsigned char header[tfrecord::header_bytes];
  auto got = read_bytes(header, sizeof header);
  auto gzip_error = [&]() -> std::string {
    int code = 0;
    const char* msg = impl_->gz ? gzerror(impl_->gz, &code) : nullptr;
    return msg != nullptr && code != Z_OK ? std::string{msg}
                                          : std::string{"read error"};
  };
  if (impl_->read_failed)
    return fail(read_status::io_error, record_offset_, gzip_error());
  if (got == 0)
    return read_status::end;
  if (got < sizeof header)
    return fail(read_status::truncated, record_offset_,
                "file ends inside a record header (" + std::to_string(got)
                  + " of 12 bytes)");
  auto length = load_u64(header);
  if (opts_.verify_crc && masked_crc32c(header, 8) != load_u32(header + 8))
    return fail(read_status::corrupt_length, record_offset_,
                "corrupt record length (CRC mismatch); the rest of the file "
                "cannot be read");
  if (length > opts_.max_record_bytes)
    return fail(read_status::too_large, record_offset_,
                "record declares " + std::to_string(length)
                  + " bytes, more than the limit of "
                  + std::to_string(opts_.max_record_bytes));
  if (impl_->plain
      && length + tfrecord::footer_bytes > impl_->file_size - offset_)
    return fail(read_status::truncated, record_offset_,
                "file ends inside a record: it declares "
                  + std::to_string(length) + " bytes but only "
                  + std::to_string(impl_->file_size - offset_)
                  + " bytes are left in the file");
  if (impl_->plain) {
    // In the mapping; the length was checked against the file above.
    out = std::string_view{impl_->map + offset_, static_cast<size_t>(length)};
    offset_ += length;
  } else {
    auto& buf = impl_->buf;
    buf.clear();
    while (buf.size() < length) {
      auto have = buf.size();
      auto want = static_cast<size_t>(
        std::min<uint64_t>(length - have, read_chunk));
      buf.resize(have + want);
      auto n = read_bytes(buf.data() + have, want);
      if (n < want) {
        buf.resize(have + n);
        if (impl_->read_failed)
          return fail(read_status::io_error, record_offset_, gzip_error());
        return fail(read_status::truncated, record_offset_,
                    "file ends inside a record (" + std::to_string(buf.size())
                      + " of " + std::to_string(length) + " data bytes)");
      }
    }
    out = buf;
  }
  unsigned char footer[tfrecord::footer_bytes];
  if (read_bytes(footer, sizeof footer) < sizeof footer) {
    if (impl_->read_failed)
      return fail(read_status::io_error, record_offset_, gzip_error());
    return fail(read_status::truncated, record_offset_,
                "file ends inside a record's data CRC");
  }
  ++index_;
  if (opts_.verify_crc
      && masked_crc32c(out.data(), out.size()) != load_u32(footer))
    return fail(read_status::corrupt_data, record_offset_,
                "corrupt record data (CRC mismatch) in record "
                  + std::to_string(index_ - 1));
  return read_status::ok;
}

bool tfrecord_reader::seek(uint64_t offset, uint64_t index) {
  if (!impl_)
    return false;
  bool ok = impl_->plain
              ? offset <= impl_->file_size
              : gzseek(impl_->gz, static_cast<z_off_t>(offset), SEEK_SET)
                  == static_cast<z_off_t>(offset);
  if (!ok) {
    error_ = path_ + ": cannot seek to offset " + std::to_string(offset);
    return false;
  }
  offset_ = offset;
  index_ = index;
  return true;
}

} // namespace af
