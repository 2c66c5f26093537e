// length_buckets: records held in buckets by length until a bucket fills
// its batch (padded_batch, bucket_by_length). Declared in
// actors/dataset/detail/length_buckets.hpp.
#include "actorflow/actors/dataset/detail/length_buckets.hpp"

#include <algorithm>
#include <stdexcept>

#include "actorflow/runtime/core/rows.hpp"
#include "actorflow/runtime/state/state_io.hpp"

namespace af::detail {

namespace {

class length_buckets : public stage_logic {
public:
  explicit length_buckets(length_buckets_config cfg)
    : cfg_(std::move(cfg)),
      tag_(cfg_.stage + "/1"),
      buckets_(cfg_.sizes.size()) {}

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
        throw std::runtime_error(cfg_.stage + ": length_field '"
                                 + cfg_.length_field + "' is " + to_string(t)
                                 + ", not i64 with one value per record");
      lengths = t.data_as<int64_t>();
    }
    for (int64_t i = 0; i < n; ++i) {
      auto b = lengths ? bucket_of(lengths[i], *held, i) : 0;
      auto& bucket = buckets_[b];
      bucket.push_back({held, i});
      if (static_cast<int64_t>(bucket.size()) == cfg_.sizes[b])
        out.push(take(b));
    }
  }

  void end_of_epoch(uint64_t, emitter& out) override { flush(out); }

  void finish(emitter& out) override { flush(out); }

  std::string snapshot() const override {
    std::vector<batch> held;
    std::vector<int64_t> which;
    for (size_t b = 0; b < buckets_.size(); ++b)
      if (!buckets_[b].empty()) {
        held.push_back(gather_padded(refs(buckets_[b]), cfg_.padding_value,
                                     cfg_.widths[b]));
        which.push_back(static_cast<int64_t>(b));
      }
    return save_state(tag_, held, which, seq_, epoch_);
  }

  void restore(const std::string& state) override {
    std::vector<batch> held;
    std::vector<int64_t> which;
    uint64_t seq = 0, epoch = 0;
    load_state(state, tag_, held, which, seq, epoch);
    std::vector<std::vector<pending>> buckets(buckets_.size());
    auto damaged = "a damaged " + tag_ + " state: ";
    if (held.size() != which.size())
      throw std::invalid_argument(damaged + std::to_string(held.size())
                                  + " batches for "
                                  + std::to_string(which.size()) + " buckets");
    for (size_t k = 0; k < held.size(); ++k) {
      auto b = which[k];
      if (b < 0 || static_cast<size_t>(b) >= buckets.size()
          || !buckets[static_cast<size_t>(b)].empty())
        throw std::invalid_argument(damaged + "bucket " + std::to_string(b)
                                    + " of " + std::to_string(buckets.size()));
      try {
        check_rows(held[k]);
      } catch (const std::runtime_error& e) {
        throw std::invalid_argument(damaged + e.what());
      }
      auto n = held[k].records();
      if (n <= 0 || n >= cfg_.sizes[static_cast<size_t>(b)])
        throw std::invalid_argument(
          damaged + "bucket " + std::to_string(b) + " holds "
          + std::to_string(n) + " records, its batches "
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

  size_t bucket_of(int64_t length, const batch& item, int64_t row) const {
    auto it = std::upper_bound(cfg_.boundaries.begin(), cfg_.boundaries.end(),
                               length);
    auto b = static_cast<size_t>(it - cfg_.boundaries.begin());
    if (b >= buckets_.size())
      throw std::runtime_error(
        cfg_.stage + ": record " + std::to_string(row) + " of item "
        + std::to_string(item.seq) + " has " + cfg_.length_field + " "
        + std::to_string(length) + ", not below the last bucket boundary "
        + std::to_string(cfg_.boundaries.back())
        + " (a filter stage before it can drop such records: where: \""
        + cfg_.length_field + " < " + std::to_string(cfg_.boundaries.back())
        + "\")");
    return b;
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
      gather_padded(refs(buckets_[b]), cfg_.padding_value, cfg_.widths[b]);
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

  length_buckets_config cfg_;
  std::string tag_;
  std::vector<std::vector<pending>> buckets_;
  uint64_t seq_ = 0;
  uint64_t epoch_ = 0;
};

} // namespace

std::shared_ptr<stage_logic> make_length_buckets(length_buckets_config cfg) {
  auto buckets = cfg.boundaries.size() + (cfg.bounded ? 0 : 1);
  if (buckets == 0 || cfg.sizes.size() != buckets
      || cfg.widths.size() != buckets)
    throw std::invalid_argument(
      cfg.stage + ": " + std::to_string(cfg.boundaries.size())
      + " bucket boundaries make " + std::to_string(buckets)
      + " buckets, with " + std::to_string(cfg.sizes.size())
      + " batch sizes and " + std::to_string(cfg.widths.size()) + " widths");
  return std::make_shared<length_buckets>(std::move(cfg));
}

} // namespace af::detail
