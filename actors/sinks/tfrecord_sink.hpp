// tfrecord_sink: writes every record it receives as a tf.Example into
// TFRecord files, so that a preprocessed dataset is made once and read
// back by tfrecord_source + example_parse, or by TensorFlow (tf.data's
// save). bytes fields become bytes_list, f32 float_list, i64, i32 and u8
// int64_list, each record's values flattened in row-major order; a field X
// with a companion "X_length" (i64 [n], example_parse's var_len) is cut to
// each record's length and written without it. f64, f16 and bf16 fields
// have no exact tf.Example form and are refused by name.
//
// Replica r writes "<path>-RRRRR-FFFFF.tfrecord" (".gz" added with GZIP),
// F counting from 0; each file appears under its name, fsynced and
// renamed, once complete (runtime/formats/tfrecord_writer.hpp). A new file starts
// after records_per_file records and at every checkpoint, whose state is
// the number of files complete: a resumed job removes the files of this
// replica written after it and goes on from there, so every record is in
// exactly one file. A fresh job refuses to start over files of an earlier
// run. Config: topology.TFRecordSinkConfig.
#pragma once

#include <string>

#include "actorflow/runtime/stage/registry.hpp"

namespace af {

/// The name of file `file` of replica `replica` (see above).
std::string tfrecord_sink_file(const std::string& path, uint32_t replica,
                               uint64_t file, bool gzip);

stage_type tfrecord_sink_type();

} // namespace af
