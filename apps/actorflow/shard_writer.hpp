// Writes records into N TFRecord shards named PREFIX-00000-of-0000N.tfrecord,
// consecutive records to the same shard (shard k holds records
// [k*total/N, (k+1)*total/N)), with a progress line.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "actorflow/runtime/formats/tfrecord_writer.hpp"

namespace af::cli {

class shard_writer {
public:
  /// Throws std::runtime_error if a file cannot be created.
  shard_writer(std::string prefix, int shards, int64_t total,
               tfrecord::compression c);
  /// Writes record number `i` (0-based, in order).
  void write(int64_t i, std::string_view record);
  /// Closes every shard; throws on failure. Returns the file names.
  std::vector<std::string> close();

private:
  std::string name(int k) const;
  void open_next();

  std::string prefix_;
  int shards_;
  int64_t total_;
  tfrecord::compression compression_;
  int current_ = -1;
  std::unique_ptr<tfrecord_writer> writer_;
  std::vector<std::string> done_;
};

/// "PREFIX-00003-of-00010.tfrecord"
std::string shard_name(const std::string& prefix, int k, int shards);

} // namespace af::cli
