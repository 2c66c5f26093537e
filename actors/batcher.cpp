#include "actors/batcher.hpp"

#include <cstring>
#include <deque>
#include <stdexcept>

namespace af {

namespace {

class batcher : public stage_logic {
public:
  batcher(int64_t batch_size, bool drop_remainder)
    : batch_size_(batch_size), drop_remainder_(drop_remainder) {}

  void process(batch&& item, emitter& out) override {
    auto n = item.records();
    if (n == 0)
      return;
    check_compatible(item);
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

  void check_compatible(const batch& item) {
    if (layout_.fields.empty()) {
      layout_ = item;
      return;
    }
    if (item.fields.size() != layout_.fields.size())
      throw std::runtime_error("item " + std::to_string(item.seq) + " has "
                               + std::to_string(item.fields.size())
                               + " fields, earlier items had "
                               + std::to_string(layout_.fields.size()));
    for (size_t i = 0; i < item.fields.size(); ++i) {
      auto& a = item.fields[i];
      auto& b = layout_.fields[i];
      auto same_rows = [](const tensor& x, const tensor& y) {
        return x.type() == y.type() && x.shape().size() == y.shape().size()
               && std::equal(x.shape().begin() + 1, x.shape().end(),
                             y.shape().begin() + 1);
      };
      if (a.name != b.name || a.value.shape().empty()
          || !same_rows(a.value, b.value))
        throw std::runtime_error(
          "item " + std::to_string(item.seq) + ": field '" + a.name + "' ("
          + to_string(a.value) + ") does not stack with earlier items' '"
          + b.name + "' (" + to_string(b.value) + ")");
    }
  }

  // Builds one batch from the first `n` pending records.
  batch take(int64_t n) {
    batch result;
    result.seq = seq_++;
    result.epoch = epoch_;
    for (auto& f : layout_.fields) {
      auto shape = f.value.shape();
      shape[0] = n;
      result.set(f.name, tensor::allocate(f.value.type(), shape));
    }
    int64_t filled = 0;
    while (filled < n) {
      auto& src = pending_.front();
      auto count = std::min(n - filled, src.records() - offset_);
      for (size_t i = 0; i < result.fields.size(); ++i) {
        auto& from = src.fields[i].value;
        auto row = from.byte_size() / static_cast<size_t>(from.rows());
        std::memcpy(result.fields[i].value.mutable_data()
                      + static_cast<size_t>(filled) * row,
                    from.data() + static_cast<size_t>(offset_) * row,
                    static_cast<size_t>(count) * row);
      }
      filled += count;
      offset_ += count;
      if (offset_ == src.records()) {
        pending_.pop_front();
        offset_ = 0;
      }
    }
    pending_records_ -= n;
    return result;
  }

  int64_t batch_size_;
  bool drop_remainder_;
  batch layout_; // fields and shapes every item must match
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
  t.check = [](const topology::Stage& s) -> std::string {
    if (s.config_case() != topology::Stage::kBatcher)
      return "needs a batcher { batch_size: N } block";
    if (!s.batcher().has_batch_size())
      return "batcher.batch_size is required";
    if (s.batcher().batch_size() < 1)
      return "batcher.batch_size must be >= 1, got "
             + std::to_string(s.batcher().batch_size());
    return {};
  };
  t.make = [](const stage_info&, const topology::Stage& s) {
    return std::make_shared<batcher>(s.batcher().batch_size(),
                                     s.batcher().drop_remainder());
  };
  return t;
}

} // namespace af
