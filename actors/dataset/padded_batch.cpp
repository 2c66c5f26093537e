// padded_batch: batches records whose variable-length fields differ in
// length, as tf.data's padded_batch and bucket_by_sequence_length do.
// Declared in actors/dataset/padded_batch.hpp.
#include "actorflow/actors/dataset/padded_batch.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>

#include "actorflow/runtime/core/rows.hpp"
#include "actorflow/runtime/state/state_io.hpp"
#include "actorflow/runtime/topology/topology.hpp"

namespace af {

namespace {

struct padded_batch_config {
  std::vector<int64_t> boundaries; // bucket i: length < boundaries[i]
  std::vector<int64_t> sizes;      // records per batch, one per bucket
  std::string length_field;        // picks the bucket; "" with one bucket
  double padding_value = 0;
  int64_t width = -1; // fixed width; -1: the batch's longest record
  bool drop_remainder = false;
};

padded_batch_config padded_batch_config_of(const topology::Stage& s) {
  auto& p = s.padded_batch();
  padded_batch_config c;
  c.boundaries.assign(p.bucket_boundaries().begin(),
                      p.bucket_boundaries().end());
  c.sizes.assign(p.bucket_batch_sizes().begin(), p.bucket_batch_sizes().end());
  if (c.sizes.empty())
    c.sizes.assign(c.boundaries.size() + 1, p.batch_size());
  c.length_field = p.length_field();
  c.padding_value = p.padding_value();
  if (p.width() > 0)
    c.width = p.width();
  c.drop_remainder = p.drop_remainder();
  return c;
}

class padded_batch : public stage_logic {
public:
  explicit padded_batch(padded_batch_config cfg)
    : cfg_(std::move(cfg)), buckets_(cfg_.sizes.size()) {}

  void process(batch&& item, emitter& out) override {
    auto n = item.records();
    if (n == 0)
      return;
    check_rows(item);
    epoch_ = item.epoch;
    auto held = std::make_shared<const batch>(std::move(item));
    const int64_t* lengths = nullptr;
    if (!cfg_.length_field.empty()) {
      auto& t = held->at(cfg_.length_field);
      if (t.type() != dtype::i64 || t.shape().size() != 1)
        throw std::runtime_error("padded_batch: length_field '"
                                 + cfg_.length_field + "' is " + to_string(t)
                                 + ", not i64 with one value per record");
      lengths = t.data_as<int64_t>();
    }
    for (int64_t i = 0; i < n; ++i) {
      auto b = lengths ? bucket_of(lengths[i]) : 0;
      auto& bucket = buckets_[b];
      bucket.push_back({held, i});
      if (static_cast<int64_t>(bucket.size()) == cfg_.sizes[b])
        out.push(take(b));
    }
  }

  void end_of_epoch(uint64_t, emitter& out) override { flush(out); }

  void finish(emitter& out) override { flush(out); }

  // Each non-empty bucket's records as one padded batch, and its number.
  std::string snapshot() const override {
    std::vector<batch> held;
    std::vector<int64_t> which;
    for (size_t b = 0; b < buckets_.size(); ++b)
      if (!buckets_[b].empty()) {
        held.push_back(gather_padded(refs(buckets_[b]), cfg_.padding_value,
                                     cfg_.width));
        which.push_back(static_cast<int64_t>(b));
      }
    return save_state("padded_batch/1", held, which, seq_, epoch_);
  }

  void restore(const std::string& state) override {
    std::vector<batch> held;
    std::vector<int64_t> which;
    uint64_t seq = 0, epoch = 0;
    load_state(state, "padded_batch/1", held, which, seq, epoch);
    std::vector<std::vector<pending>> buckets(buckets_.size());
    if (held.size() != which.size())
      throw std::invalid_argument("a damaged padded_batch/1 state: "
                                  + std::to_string(held.size())
                                  + " batches for "
                                  + std::to_string(which.size()) + " buckets");
    for (size_t k = 0; k < held.size(); ++k) {
      auto b = which[k];
      if (b < 0 || static_cast<size_t>(b) >= buckets.size()
          || !buckets[static_cast<size_t>(b)].empty())
        throw std::invalid_argument("a damaged padded_batch/1 state: bucket "
                                    + std::to_string(b) + " of "
                                    + std::to_string(buckets.size()));
      try {
        check_rows(held[k]);
      } catch (const std::runtime_error& e) {
        throw std::invalid_argument(
          std::string{"a damaged padded_batch/1 state: "} + e.what());
      }
      auto n = held[k].records();
      if (n <= 0 || n >= cfg_.sizes[static_cast<size_t>(b)])
        throw std::invalid_argument(
          "a damaged padded_batch/1 state: bucket " + std::to_string(b)
          + " holds " + std::to_string(n) + " records, its batches "
          + std::to_string(cfg_.sizes[static_cast<size_t>(b)]));
      auto item = std::make_shared<const batch>(std::move(held[k]));
      for (int64_t i = 0; i < n; ++i)
        buckets[static_cast<size_t>(b)].push_back({item, i});
    }
    buckets_ = std::move(buckets);
    seq_ = seq;
    epoch_ = epoch;
  }

private:
  struct pending {
    std::shared_ptr<const batch> item;
    int64_t row;
  };

  size_t bucket_of(int64_t length) const {
    auto it = std::upper_bound(cfg_.boundaries.begin(), cfg_.boundaries.end(),
                               length);
    return static_cast<size_t>(it - cfg_.boundaries.begin());
  }

  static std::vector<row_ref> refs(const std::vector<pending>& rows) {
    std::vector<row_ref> out;
    out.reserve(rows.size());
    for (auto& r : rows)
      out.push_back(row_ref{r.item.get(), r.row});
    return out;
  }

  batch take(size_t b) {
    auto result =
      gather_padded(refs(buckets_[b]), cfg_.padding_value, cfg_.width);
    buckets_[b].clear();
    result.seq = seq_++;
    result.epoch = epoch_;
    return result;
  }

  void flush(emitter& out) {
    for (size_t b = 0; b < buckets_.size(); ++b) {
      if (buckets_[b].empty())
        continue;
      if (cfg_.drop_remainder)
        buckets_[b].clear();
      else
        out.push(take(b));
    }
  }

  padded_batch_config cfg_;
  std::vector<std::vector<pending>> buckets_;
  uint64_t seq_ = 0;
  uint64_t epoch_ = 0;
};

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
  t.config_required = "batch_size: N";
  t.check = check_padded_batch;
  t.make = [](const stage_info&, const topology::Stage& s) {
    return std::make_shared<padded_batch>(padded_batch_config_of(s));
  };
  return t;
}

} // namespace af
