// length_buckets: the logic padded_batch and bucket_by_length share.
// Records go to a bucket by their length (an i64 field, one value per
// record); a bucket that holds its batch size goes out as one padded batch
// (runtime/core/rows.hpp, gather_padded), and each epoch's remainders go
// out at its end, bucket by bucket (or are dropped). Its state in a
// checkpoint: each non-empty bucket as one padded batch and its number.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actorflow/runtime/stage/stage.hpp"

namespace af::detail {

struct length_buckets_config {
  /// The stage type, for messages and the state's tag ("<stage>/1").
  std::string stage;
  /// Bucket i: length < boundaries[i], the bucket after the last boundary
  /// takes the rest unless `bounded`. Strictly increasing.
  std::vector<int64_t> boundaries;
  /// Records per batch, one per bucket (boundaries + 1, or boundaries when
  /// bounded).
  std::vector<int64_t> sizes;
  /// Per bucket, the width every padded field is padded to; -1: the
  /// batch's longest record. One per bucket.
  std::vector<int64_t> widths;
  /// The i64 field of each record's length; "" with one bucket.
  std::string length_field;
  /// A record of length >= the last boundary fails the stage, naming it.
  bool bounded = false;
  double padding_value = 0;
  bool drop_remainder = false;
};

/// The logic of one replica. Throws std::invalid_argument for a config
/// whose vectors disagree in size.
std::shared_ptr<stage_logic> make_length_buckets(length_buckets_config cfg);

} // namespace af::detail
