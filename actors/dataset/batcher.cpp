// batcher: re-chunks incoming items into batches of exactly `batch_size`
// records, one contiguous tensor per field. Declared in
// actors/dataset/batcher.hpp.
#include "actorflow/actors/dataset/batcher.hpp"

#include <deque>

#include "actorflow/runtime/core/rows.hpp"
#include "actorflow/runtime/state/state_io.hpp"

namespace af {

namespace {

struct batcher_config {
  int64_t batch_size = 0; // records per batch; required
  bool drop_remainder = false; // drop each epoch's incomplete last batch
};

batcher_config batcher_config_of(const topology::Stage& s) {
  batcher_config c;
  c.batch_size = s.batcher().batch_size();
  c.drop_remainder = s.batcher().drop_remainder();
  return c;
}

class batcher : public stage_logic {
public:
  explicit batcher(const batcher_config& cfg)
    : batch_size_(cfg.batch_size), drop_remainder_(cfg.drop_remainder) {}

  void process(batch&& item, emitter& out) override {
    auto n = item.records();
    if (n == 0)
      return;
    check_rows(item);
    if (pending_records_ == 0 && n == batch_size_) {
      item.seq = seq_++;
      out.push(std::move(item));
      return;
    }
    epoch_ = item.epoch;
    pending_.push_back(std::move(item));
    pending_records_ += n;
    while (pending_records_ >= batch_size_)
      out.push(take(batch_size_));
  }

  void end_of_epoch(uint64_t, emitter& out) override { flush(out); }

  void finish(emitter& out) override { flush(out); }

  std::string snapshot() const override {
    std::vector<batch> pending(pending_.begin(), pending_.end());
    return save_state("batcher/1", pending, pending_records_, offset_, seq_,
                      epoch_);
  }

  void restore(const std::string& state) override {
    std::vector<batch> pending;
    int64_t records = 0, offset = 0;
    uint64_t seq = 0, epoch = 0;
    load_state(state, "batcher/1", pending, records, offset, seq, epoch);
    // The counts must describe the batches held (a state that decodes but
    // does not add up would make take() read past them).
    int64_t held = 0;
    for (size_t i = 0; i < pending.size(); ++i) {
      try {
        check_rows(pending[i]);
      } catch (const std::runtime_error& e) {
        throw std::invalid_argument("a damaged batcher/1 state: pending item "
                                    + std::to_string(i) + ": " + e.what());
      }
      if (pending[i].records() <= 0)
        throw std::invalid_argument("a damaged batcher/1 state: pending item "
                                    + std::to_string(i) + " has no records");
      held += pending[i].records();
    }
    if (offset < 0 || (pending.empty() ? offset != 0
                                       : offset >= pending.front().records())
        || records != held - offset)
      throw std::invalid_argument(
        "a damaged batcher/1 state: " + std::to_string(records)
        + " pending records at offset " + std::to_string(offset) + " of "
        + std::to_string(pending.size()) + " items holding "
        + std::to_string(held));
    pending_.assign(pending.begin(), pending.end());
    pending_records_ = records;
    offset_ = offset;
    seq_ = seq;
    epoch_ = epoch;
  }

private:
  void flush(emitter& out) {
    if (pending_records_ > 0) {
      if (drop_remainder_) {
        pending_.clear();
        pending_records_ = 0;
        offset_ = 0;
      } else {
        out.push(take(pending_records_));
      }
    }
  }

  // Builds one batch from the first `n` pending records.
  batch take(int64_t n) {
    std::vector<row_ref> rows;
    rows.reserve(static_cast<size_t>(n));
    auto it = pending_.begin();
    auto offset = offset_;
    while (static_cast<int64_t>(rows.size()) < n) {
      rows.push_back(row_ref{&*it, offset});
      if (++offset == it->records()) {
        ++it;
        offset = 0;
      }
    }
    auto result = gather_rows(rows);
    result.seq = seq_++;
    result.epoch = epoch_;
    pending_.erase(pending_.begin(), it);
    offset_ = offset;
    pending_records_ -= n;
    return result;
  }

  int64_t batch_size_;
  bool drop_remainder_;
  std::deque<batch> pending_;
  int64_t pending_records_ = 0;
  int64_t offset_ = 0; // records of pending_.front() already taken
  uint64_t seq_ = 0;
  uint64_t epoch_ = 0;
};

} // namespace

stage_type batcher_type() {
  stage_type t;
  t.name = "batcher";
  t.kind = stage_kind::transform;
  t.description = "re-chunks items into batches of batch_size records";
  t.config_block = "batcher";
  t.config_required = {"batch_size"};
  t.check = [](const topology::Stage& s) -> std::string {
    if (s.batcher().batch_size() < 1)
      return "batcher.batch_size must be >= 1, got "
             + std::to_string(s.batcher().batch_size());
    return {};
  };
  t.make = [](const stage_info&, const topology::Stage& s) {
    return std::make_shared<batcher>(batcher_config_of(s));
  };
  return t;
}

} // namespace af
