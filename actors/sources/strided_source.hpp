// Sources that generate records by index: replica r of R makes records r,
// r + R, r + 2R, ... of every epoch, the same records each epoch, in items
// of at most `per_item` records, and ends each epoch after its last item.
// A replica that takes over a lost one (stage_type::reassignable) makes
// that replica's records too, from the epoch it was lost in.
// synthetic_source and ctr_source derive from it and only fill items.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "actorflow/runtime/stage/stage.hpp"
#include "actorflow/runtime/state/state_io.hpp"

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
    // This replica's records of the epoch first, then those of the lost
    // replicas it took over (stage_logic::take_over), one pass per epoch
    // each still owes up to this one.
    if (next_ < records_) {
      emit(next_, out);
      return true;
    }
    for (auto& sh : shares_)
      if (sh.epoch <= epoch_ && sh.epoch < static_cast<uint64_t>(epochs_)) {
        if (sh.next < records_)
          emit(sh.next, out);
        if (sh.next >= records_) {
          sh.next = sh.replica;
          ++sh.epoch;
        }
        return true;
      }
    if (!reopened_) // (a taken-over share after the last epoch's end)
      out.end_epoch(epoch_);
    ++epoch_;
    next_ = info_.replica;
    return epoch_ < static_cast<uint64_t>(epochs_);
  }

  void take_over(uint32_t replica, uint64_t from_epoch) final {
    shares_.push_back(share{replica, from_epoch, replica});
    if (epoch_ >= static_cast<uint64_t>(epochs_)
        && from_epoch < static_cast<uint64_t>(epochs_)) {
      // Done already: the owed passes go out under the last epoch.
      epoch_ = static_cast<uint64_t>(epochs_) - 1;
      next_ = records_;
      reopened_ = true;
    }
  }

  // This replica's records over all epochs (shares taken over not
  // counted).
  void metrics(std::vector<metric>& out) const override {
    auto stride = static_cast<int64_t>(info_.replicas);
    auto r = static_cast<int64_t>(info_.replica);
    auto mine = records_ > r ? (records_ - r + stride - 1) / stride : 0;
    out.push_back(
      {metric_name::records_total, static_cast<double>(mine * epochs_)});
  }

  std::string snapshot() const final {
    return save_state("strided/1", next_, epoch_, seq_);
  }

  void restore(const std::string& state) final {
    int64_t next = 0;
    uint64_t epoch = 0, seq = 0;
    load_state(state, "strided/1", next, epoch, seq);
    // next is this replica's next record: from the replica's index on, at
    // most one stride past the end (emit() moves it past the last record;
    // take_over() after the end sets it to records_).
    auto stride = static_cast<int64_t>(info_.replicas);
    auto r = static_cast<int64_t>(info_.replica);
    if (next < r || next - stride >= records_
        || epoch > static_cast<uint64_t>(epochs_))
      throw std::invalid_argument(
        "a damaged strided/1 state: record " + std::to_string(next)
        + " of epoch " + std::to_string(epoch) + " for replica "
        + std::to_string(r) + " of " + std::to_string(stride) + " ("
        + std::to_string(records_) + " records, "
        + std::to_string(epochs_) + " epochs)");
    next_ = next;
    epoch_ = epoch;
    seq_ = seq;
  }

protected:
  /// Sets the fields of `b` for the n records first, first + stride, ...
  virtual void fill(int64_t first, int64_t stride, int64_t n, batch& b) = 0;

  const stage_info& info() const noexcept { return info_; }

private:
  // Pushes the next item of the records first, first + stride, ...
  // (`first` moves on past them).
  void emit(int64_t& first, emitter& out) {
    auto stride = static_cast<int64_t>(info_.replicas);
    int64_t left =
      first < records_ ? (records_ - first + stride - 1) / stride : 0;
    auto n = std::min(left, per_item_);
    if (n <= 0)
      return;
    batch b;
    b.seq = seq_++;
    b.epoch = epoch_;
    fill(first, stride, n, b);
    first += n * stride;
    out.push(std::move(b));
  }

  // A lost replica's records this one took over: its next record and the
  // epoch of the pass under way.
  struct share {
    uint32_t replica;
    uint64_t epoch;
    int64_t next;
  };

  stage_info info_;
  int64_t records_, per_item_, epochs_;
  int64_t next_;
  uint64_t epoch_ = 0;
  uint64_t seq_ = 0;
  std::vector<share> shares_;
  bool reopened_ = false;
};

} // namespace af
