// Test data for the input stages: gray JPEGs in tf.Example records written
// as TFRecord shards, and the topology text that reads and parses them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actorflow/proto/topology.pb.h"
#include "actorflow/runtime/core/batch.hpp"
#include "tests/support/temp_dir.hpp"

namespace af::test {

/// A w x h gray JPEG whose pixels all equal `value`.
std::string gray_jpeg(int w, int h, uint8_t value);

/// A serialized tf.Example: "image" (bytes), "label" (int64), "weight"
/// (float, 0.5).
std::string example(const std::string& image, int64_t label);

/// `files` shards data-<f>.tfrecord in `dir` of `per_file` records each;
/// record label = global index, image gray value = (index * 7) % 256,
/// images of size x size. Returns the paths.
std::vector<std::string> write_dataset(const temp_dir& dir, int files,
                                       int per_file, int size = 16);

/// Topology text: runtime seed 7, a tfrecord_source "read" over
/// write_dataset's files (8 records per item, `reader_extra` in its block,
/// `reader_replicas` replicas), an example_parse "parse" of the three
/// features, then `middle`.
std::string pipeline(const temp_dir& dir, const std::string& middle,
                     const std::string& reader_extra = "",
                     int reader_replicas = 1);

/// Every "label" value of `items`, in order.
std::vector<int64_t> labels_of(const std::vector<batch>& items);

/// A tfrecord_source stage "read" over write_dataset's files in `dir`
/// (interleave 2).
topology::Stage tfrecord_stage(const temp_dir& dir, int64_t per_item,
                               int64_t epochs);

} // namespace af::test
