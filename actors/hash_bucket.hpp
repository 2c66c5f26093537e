// hash_bucket: maps string features to integer ids in [0, buckets), as
// tf.strings.to_hash_bucket_fast and
// tf.feature_column.categorical_column_with_hash_bucket do, with xxHash:
//
//   id = XXH64(the string's bytes, its length, seed 0) mod buckets
//
// (the 64-bit hash taken as unsigned; an empty string hashes like any
// other). TensorFlow hashes with FarmHash, so the ids are not TensorFlow's.
// Each configured feature reads a bytes field of one string per record
// ([n]) and writes i64 [n], under its own name unless `output` says
// otherwise; every feature reads the item as it came in, and the other
// fields pass through. Config: topology.HashBucketConfig.
#pragma once

#include <cstdint>
#include <string_view>

#include "runtime/registry.hpp"

namespace af {

/// The bucket of `s` among `buckets` (> 0; not checked), as above.
int64_t hash_bucket_id(std::string_view s, int64_t buckets) noexcept;

stage_type hash_bucket_type();

} // namespace af
