// hash_bucket: maps string features to integer ids in [0, buckets), as
// tf.strings.to_hash_bucket_fast and
// tf.feature_column.categorical_column_with_hash_bucket do. Declared in
// actors/features/hash_bucket.hpp.
#include "actorflow/actors/features/hash_bucket.hpp"

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <farmhash.h>
#include <xxhash.h>

#include "actorflow/actors/features/feature_fields.hpp"

namespace af {

int64_t hash_bucket_id(std::string_view s, int64_t buckets,
                       string_hash hash) noexcept {
  auto h = hash == string_hash::fingerprint64
             ? static_cast<uint64_t>(util::Fingerprint64(s.data(), s.size()))
             : static_cast<uint64_t>(XXH64(s.data(), s.size(), 0));
  return static_cast<int64_t>(h % static_cast<uint64_t>(buckets));
}

namespace {

struct hash_feature {
  std::string input;
  std::string output; // default: input
  int64_t buckets = 0;
};

std::vector<hash_feature> hash_features_of(const topology::Stage& s) {
  auto& p = s.hash_bucket();
  std::vector<hash_feature> out;
  for (auto& f : p.feature())
    out.push_back({f.input(), f.output().empty() ? f.input() : f.output(),
                   f.has_buckets() ? f.buckets() : p.buckets()});
  return out;
}

// The `hash` setting; false if it names none.
bool hash_of(const std::string& name, string_hash& out) {
  if (name.empty() || name == "xxh64")
    out = string_hash::xxh64;
  else if (name == "fingerprint64")
    out = string_hash::fingerprint64;
  else
    return false;
  return true;
}

std::string check_hash_bucket(const topology::Stage& s) {
  auto& p = s.hash_bucket();
  if (string_hash h; !hash_of(p.hash(), h))
    return "hash_bucket.hash must be \"xxh64\" (the default) or "
           "\"fingerprint64\" (TensorFlow's), got \""
           + p.hash() + "\"";
  if (p.has_buckets() && p.buckets() <= 0)
    return "hash_bucket.buckets must be > 0, got "
           + std::to_string(p.buckets());
  std::vector<std::string> outputs;
  for (int i = 0; i < p.feature_size(); ++i) {
    auto& f = p.feature(i);
    auto at = "hash_bucket.feature[" + std::to_string(i) + "]";
    if (!f.has_buckets() && !p.has_buckets())
      return at + " ('" + f.input()
             + "'): buckets is required (here or as hash_bucket.buckets)";
    if (f.has_buckets() && f.buckets() <= 0)
      return at + " ('" + f.input() + "'): buckets must be > 0, got "
             + std::to_string(f.buckets());
    outputs.push_back(f.output().empty() ? f.input() : f.output());
  }
  return duplicate_feature_output(outputs, "hash_bucket");
}

class hash_bucket : public stage_logic {
public:
  hash_bucket(std::vector<hash_feature> features, string_hash hash)
    : features_(std::move(features)), hash_(hash) {}

  void process(batch&& item, emitter& out) override {
    // Every feature reads the item as it came in: hash all, then set.
    std::vector<tensor> ids;
    ids.reserve(features_.size());
    for (auto& f : features_) {
      auto& in = feature_field(item, f.input, "hash_bucket");
      if (in.type() != dtype::bytes || in.shape().size() != 1)
        throw input_error("hash_bucket: field '" + f.input + "' is "
                          + to_string(in)
                          + ", not one string (bytes [n]) per record");
      auto n = in.rows();
      auto t = tensor::allocate(dtype::i64, {n});
      auto* dst = t.mutable_data_as<int64_t>();
      for (int64_t i = 0; i < n; ++i)
        dst[i] = hash_bucket_id(in.string_at(i), f.buckets, hash_);
      ids.push_back(std::move(t));
    }
    for (size_t k = 0; k < features_.size(); ++k)
      item.set(features_[k].output, std::move(ids[k]));
    out.push(std::move(item));
  }

private:
  std::vector<hash_feature> features_;
  string_hash hash_;
};

} // namespace

stage_type hash_bucket_type() {
  stage_type t;
  t.name = "hash_bucket";
  t.kind = stage_kind::transform;
  t.one_to_one = true;
  t.description = "maps string fields to ids in [0, buckets) by xxHash or "
                  "TensorFlow's FarmHash Fingerprint64";
  t.config_block = "hash_bucket";
  t.config_required = {"feature.input"};
  t.check = check_hash_bucket;
  t.make = [](const stage_info&, const topology::Stage& s) {
    if (auto problem = check_hash_bucket(s); !problem.empty())
      throw std::invalid_argument(problem);
    string_hash hash{};
    hash_of(s.hash_bucket().hash(), hash);
    return std::make_shared<hash_bucket>(hash_features_of(s), hash);
  };
  return t;
}

} // namespace af
