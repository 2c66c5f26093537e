// Sources that generate records by index: replica r of R makes records r,
// r + R, r + 2R, ... of every epoch, the same records each epoch, in items
// of at most `per_item` records, and ends each epoch after its last item.
// synthetic_source and ctr_source derive from it and only fill items.
#pragma once

#include <algorithm>
#include <cstdint>

#include "runtime/stage.hpp"
#include "runtime/state_io.hpp"

namespace af {

class strided_source : public stage_logic {
public:
  strided_source(const stage_info& info, int64_t records, int64_t per_item,
                 int64_t epochs)
    : info_(info), records_(records), per_item_(per_item), epochs_(epochs),
      next_(info.replica) {}

  bool produce(emitter& out) final {
    if (epoch_ >= static_cast<uint64_t>(epochs_))
      return false;
    auto stride = static_cast<int64_t>(info_.replicas);
    // Records of this replica left in the epoch.
    int64_t left =
      next_ < records_ ? (records_ - next_ + stride - 1) / stride : 0;
    auto n = std::min(left, per_item_);
    if (n > 0) {
      batch b;
      b.seq = seq_++;
      b.epoch = epoch_;
      fill(next_, stride, n, b);
      next_ += n * stride;
      out.push(std::move(b));
    }
    if (next_ >= records_) {
      out.end_epoch(epoch_);
      ++epoch_;
      next_ = info_.replica;
    }
    return epoch_ < static_cast<uint64_t>(epochs_);
  }

  std::string snapshot() const final {
    return save_state("strided/1", next_, epoch_, seq_);
  }

  void restore(const std::string& state) final {
    load_state(state, "strided/1", next_, epoch_, seq_);
  }

protected:
  /// Sets the fields of `b` for the n records first, first + stride, ...
  virtual void fill(int64_t first, int64_t stride, int64_t n, batch& b) = 0;

  const stage_info& info() const noexcept { return info_; }

private:
  stage_info info_;
  int64_t records_, per_item_, epochs_;
  int64_t next_;
  uint64_t epoch_ = 0;
  uint64_t seq_ = 0;
};

} // namespace af
