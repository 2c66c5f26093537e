// Writes records into N TFRecord shards named
// PREFIX-00000-of-0000N.tfrecord, consecutive records to the same shard
// (shard k holds records [k*total/N, (k+1)*total/N)), with a progress line.
// Declared in apps/actorflow/shard_writer.hpp.
#include "apps/actorflow/shard_writer.hpp"

#include <cstdio>
#include <stdexcept>

namespace af::cli {

std::string shard_name(const std::string& prefix, int k, int shards) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "-%05d-of-%05d.tfrecord", k, shards);
  return prefix + buf;
}

shard_writer::shard_writer(std::string prefix, int shards, int64_t total,
                           tfrecord::compression c)
  : prefix_(std::move(prefix)), shards_(shards), total_(total),
    compression_(c) {}

std::string shard_writer::name(int k) const {
  return shard_name(prefix_, k, shards_);
}

void shard_writer::open_next() {
  if (writer_) {
    if (!writer_->close())
      throw std::runtime_error(writer_->error());
    done_.push_back(name(current_));
  }
  ++current_;
  writer_ = std::make_unique<tfrecord_writer>();
  if (!writer_->open(name(current_), compression_))
    throw std::runtime_error(writer_->error());
}

void shard_writer::write(int64_t i, std::string_view record) {
  // Shard k holds records [k * total / shards, (k + 1) * total / shards).
  while (current_ < shards_ - 1
         && (current_ < 0 || i >= (current_ + 1) * total_ / shards_))
    open_next();
  if (!writer_->write(record))
    throw std::runtime_error(writer_->error());
}

std::vector<std::string> shard_writer::close() {
  while (current_ < shards_ - 1)
    open_next();  // empty trailing shards still exist
  if (writer_) {
    if (!writer_->close())
      throw std::runtime_error(writer_->error());
    done_.push_back(name(current_));
    writer_.reset();
  }
  return done_;
}

} // namespace af::cli
