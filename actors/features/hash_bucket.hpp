// hash_bucket: maps string features to integer ids in [0, buckets), as
// tf.strings.to_hash_bucket_fast and
// tf.feature_column.categorical_column_with_hash_bucket do:
//
//   id = H(the string's bytes) mod buckets
//
// (the 64-bit hash taken as unsigned; an empty string hashes like any
// other), H one of
//   xxh64          XXH64(bytes, length, seed 0) from xxHash (the default)
//   fingerprint64  FarmHash's Fingerprint64(bytes, length), which
//                  TensorFlow's to_hash_bucket_fast uses: TensorFlow's ids.
// Each configured feature reads a bytes field of one string per record
// ([n]) and writes i64 [n], under its own name unless `output` says
// otherwise; every feature reads the item as it came in, and the other
// fields pass through. Config: topology.HashBucketConfig.
#pragma once

#include <cstdint>
#include <string_view>

#include "actorflow/runtime/stage/registry.hpp"

namespace af {

/// The 64-bit hashes hash_bucket can use (above).
enum class string_hash { xxh64, fingerprint64 };

/// The bucket of `s` among `buckets` (> 0; not checked), as above.
int64_t hash_bucket_id(std::string_view s, int64_t buckets,
                       string_hash h = string_hash::xxh64) noexcept;

stage_type hash_bucket_type();

} // namespace af
