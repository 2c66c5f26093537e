// padded_batch: batches records whose variable-length fields differ in
// length, as tf.data's padded_batch and bucket_by_sequence_length do.
// Declared in actors/dataset/padded_batch.hpp.
#include "actorflow/actors/dataset/padded_batch.hpp"

#include <cmath>

#include "actorflow/actors/dataset/detail/length_buckets.hpp"

namespace af {

namespace {

detail::length_buckets_config padded_batch_config_of(const topology::Stage& s) {
  auto& p = s.padded_batch();
  detail::length_buckets_config c;
  c.stage = "padded_batch";
  c.boundaries.assign(p.bucket_boundaries().begin(),
                      p.bucket_boundaries().end());
  c.sizes.assign(p.bucket_batch_sizes().begin(), p.bucket_batch_sizes().end());
  if (c.sizes.empty())
    c.sizes.assign(c.boundaries.size() + 1, p.batch_size());
  c.widths.assign(c.sizes.size(), p.width() > 0 ? p.width() : -1);
  c.length_field = p.length_field();
  c.padding_value = p.padding_value();
  c.drop_remainder = p.drop_remainder();
  return c;
}

std::string check_padded_batch(const topology::Stage& s) {
  auto& p = s.padded_batch();
  auto buckets = p.bucket_boundaries_size() + 1;
  if (p.bucket_batch_sizes().empty()) {
    if (!p.has_batch_size())
      return "padded_batch.batch_size is required (or bucket_batch_sizes)";
    if (p.batch_size() < 1)
      return "padded_batch.batch_size must be >= 1, got "
             + std::to_string(p.batch_size());
  } else {
    if (p.bucket_batch_sizes_size() != buckets)
      return "padded_batch: " + std::to_string(p.bucket_boundaries_size())
             + " bucket_boundaries need " + std::to_string(buckets)
             + " bucket_batch_sizes, got "
             + std::to_string(p.bucket_batch_sizes_size());
    for (auto n : p.bucket_batch_sizes())
      if (n < 1)
        return "padded_batch: bucket_batch_sizes must be >= 1, got "
               + std::to_string(n);
  }
  for (int i = 0; i < p.bucket_boundaries_size(); ++i)
    if (p.bucket_boundaries(i) < 1
        || (i > 0 && p.bucket_boundaries(i) <= p.bucket_boundaries(i - 1)))
      return "padded_batch: bucket_boundaries must be >= 1 and strictly "
             "increasing";
  if (p.bucket_boundaries_size() > 0 && p.length_field().empty())
    return "padded_batch: bucket_boundaries need a length_field (the i64 "
           "field of each record's length, e.g. \"tokens_length\")";
  if (p.has_width() && p.width() < 1)
    return "padded_batch.width must be >= 1, got " + std::to_string(p.width());
  if (!std::isfinite(p.padding_value()))
    return "padded_batch.padding_value must be a finite number";
  return {};
}

} // namespace

stage_type padded_batch_type() {
  stage_type t;
  t.name = "padded_batch";
  t.kind = stage_kind::transform;
  t.description = "batches variable-length records, padded, optionally "
                  "bucketed by length";
  t.config_block = "padded_batch";
  t.check = check_padded_batch;
  t.make = [](const stage_info&, const topology::Stage& s) {
    return detail::make_length_buckets(padded_batch_config_of(s));
  };
  return t;
}

} // namespace af
