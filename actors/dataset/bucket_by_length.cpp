// bucket_by_length: batches records of similar length together, as
// tf.data's bucket_by_sequence_length, with a batch size per bucket or a
// budget of padded values per batch. Config: topology.BucketByLengthConfig;
// the buckets are actors/dataset/detail/length_buckets.hpp's, as
// padded_batch's. Registered by its definition below (actors/builtin.cpp).
#include <cmath>
#include <string>

#include "actorflow/actors/dataset/detail/length_buckets.hpp"
#include "actorflow/runtime/stage/registry.hpp"

namespace af {

namespace {

detail::length_buckets_config
bucket_by_length_config_of(const topology::Stage& s) {
  auto& p = s.bucket_by_length();
  detail::length_buckets_config c;
  c.stage = "bucket_by_length";
  c.boundaries.assign(p.bucket_boundaries().begin(),
                      p.bucket_boundaries().end());
  c.bounded = true;
  for (size_t i = 0; i < c.boundaries.size(); ++i) {
    auto longest = c.boundaries[i] - 1;
    c.sizes.push_back(p.bucket_batch_sizes().empty()
                        ? std::max<int64_t>(1, p.tokens_per_batch() / longest)
                        : p.bucket_batch_sizes(static_cast<int>(i)));
    c.widths.push_back(p.pad_to_bucket_boundary() ? longest : -1);
  }
  c.length_field = p.length_field();
  c.padding_value = p.padding_value();
  c.drop_remainder = p.drop_remainder();
  return c;
}

std::string check_bucket_by_length(const topology::Stage& s) {
  auto& p = s.bucket_by_length();
  auto& b = p.bucket_boundaries();
  for (int i = 0; i < b.size(); ++i)
    if (b[i] < 2 || (i > 0 && b[i] <= b[i - 1]))
      return "bucket_by_length.bucket_boundaries must be >= 2 and strictly "
             "increasing, got "
             + std::to_string(b[i])
             + (i > 0 ? " after " + std::to_string(b[i - 1]) : "");
  auto sizes = p.bucket_batch_sizes_size();
  if ((sizes > 0) == (p.tokens_per_batch() != 0))
    return "bucket_by_length needs either bucket_batch_sizes or "
           "tokens_per_batch";
  if (sizes > 0 && sizes != b.size())
    return "bucket_by_length: " + std::to_string(b.size())
           + " bucket_boundaries need as many bucket_batch_sizes, got "
           + std::to_string(sizes);
  for (auto n : p.bucket_batch_sizes())
    if (n < 1)
      return "bucket_by_length.bucket_batch_sizes must be >= 1, got "
             + std::to_string(n);
  if (p.tokens_per_batch() < 0)
    return "bucket_by_length.tokens_per_batch must be >= 1, got "
           + std::to_string(p.tokens_per_batch());
  if (!std::isfinite(p.padding_value()))
    return "bucket_by_length.padding_value must be a finite number";
  return {};
}

} // namespace

stage_type bucket_by_length_type() {
  stage_type t;
  t.name = "bucket_by_length";
  t.kind = stage_kind::transform;
  t.description = "batches records of similar length, a batch size per "
                  "bucket or a budget of padded values per batch";
  t.config_block = "bucket_by_length";
  t.config_required = {"length_field", "bucket_boundaries"};
  t.check = check_bucket_by_length;
  t.make = [](const stage_info&, const topology::Stage& s) {
    return detail::make_length_buckets(bucket_by_length_config_of(s));
  };
  return t;
}

} // namespace af
