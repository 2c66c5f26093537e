// The TFRecord file format, as TensorFlow writes it (tf.io.TFRecordWriter,
// tensorflow/core/lib/io/record_writer.cc). A file is a sequence of records:
//
//   uint64  length          little-endian, bytes of data
//   uint32  length_crc      masked CRC32C of the 8 length bytes
//   byte    data[length]
//   uint32  data_crc        masked CRC32C of data
//
// masked CRC: see runtime/formats/crc32c.hpp. A file may be compressed as a whole
// with GZIP (or ZLIB); offsets then count uncompressed bytes. There is no
// file header, footer or index. The reader is runtime/formats/tfrecord_reader.hpp,
// the writer runtime/formats/tfrecord_writer.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace af::tfrecord {

constexpr size_t header_bytes = 8 + 4;  // length, length_crc
constexpr size_t footer_bytes = 4;      // data_crc
constexpr size_t overhead_bytes = header_bytes + footer_bytes;

enum class compression {
  none,
  gzip,
  automatic,  // reading only: gzip if the file starts with gzip's magic
};

/// "none", "gzip", "auto" (and "" for none); false if unknown.
bool parse_compression(const std::string& name, compression& out);
const char* to_string(compression c) noexcept;

} // namespace af::tfrecord
