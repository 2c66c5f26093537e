// example_parse: parses serialized tf.Example records (proto/example.proto,
// wire-compatible with TensorFlow's) and emits one field per declared
// feature: float -> f32, int64 -> i64, bytes -> bytes, each of shape
// [records, shape...]. Other fields of the item ("key", "index", ...) pass
// through. A missing feature, one of another type or with the wrong number
// of values fails the stage naming the feature and the record (its "key"
// when present). A var_len feature gives [records, L] values, L the
// longest record of the item, padded with zeros, and "<name>_length" [records];
// a missing var_len feature has none. Config: topology.ExampleParseConfig.
#pragma once

#include "actorflow/runtime/stage/registry.hpp"

namespace af {

stage_type example_parse_type();

} // namespace af
