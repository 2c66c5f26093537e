// shuffle: record-level shuffle through a buffer of buffer_size records, as
// tf.data's shuffle: each output record is drawn at random from the buffer,
// which refills from the input. Declared in actors/dataset/shuffle.hpp.
#include "actorflow/actors/dataset/shuffle.hpp"

#include <deque>

#include "actorflow/runtime/core/random.hpp"
#include "actorflow/runtime/core/rows.hpp"
#include "actorflow/runtime/state/state_io.hpp"

namespace af {

namespace {

struct shuffle_config {
  int64_t buffer_size = 0; // records drawn from; required
  int64_t records_per_item = 64; // of the output
  bool same_order_each_epoch = false; // else a new order each epoch
};

shuffle_config shuffle_config_of(const topology::Stage& s) {
  auto& p = s.shuffle();
  shuffle_config c;
  c.buffer_size = p.buffer_size();
  if (p.has_records_per_item())
    c.records_per_item = p.records_per_item();
  c.same_order_each_epoch = p.same_order_each_epoch();
  return c;
}

class shuffle : public stage_logic {
public:
  shuffle(const stage_info& info, const shuffle_config& cfg)
    : seed_(mix64(info.seed ^ mix64(info.replica))),
      buffer_size_(cfg.buffer_size),
      per_item_(cfg.records_per_item),
      same_order_(cfg.same_order_each_epoch),
      rng_(seed_, 0, 0) {}

  void process(batch&& item, emitter& out) override {
    auto n = item.records();
    if (n == 0)
      return;
    check_rows(item);
    if (!started_ || item.epoch != epoch_)
      start_epoch(item.epoch);
    held_.push_back(holder{std::move(item), n});
    auto* h = &held_.back();
    for (int64_t r = 0; r < n; ++r) {
      buffer_.push_back(slot{h, r});
      if (static_cast<int64_t>(buffer_.size()) > buffer_size_)
        take_one(out);
    }
  }

  void end_of_epoch(uint64_t, emitter& out) override { drain(out); }

  void finish(emitter& out) override { drain(out); }

  // The buffered records (in buffer order, so that the draws go on exactly
  // as they would have), the records drawn for the next item, and the
  // generator.
  std::string snapshot() const override {
    uint64_t rng = rng_.state();
    auto buffered = gather(buffer_);
    auto picked = gather(picked_);
    return save_sized_state(buffered.byte_size() + picked.byte_size() + 4096,
                            "shuffle/1", buffered, picked, rng, started_,
                            epoch_, seq_);
  }

  void restore(const std::string& state) override {
    batch buffered, picked;
    uint64_t rng = 0;
    load_state(state, "shuffle/1", buffered, picked, rng, started_, epoch_,
               seq_);
    // Every field must have the item's rows (the draws index them).
    for (auto* b : {&buffered, &picked}) {
      try {
        check_rows(*b);
      } catch (const std::runtime_error& e) {
        throw std::invalid_argument(std::string{"a damaged shuffle/1 state: "}
                                    + e.what());
      }
    }
    rng_ = record_rng{rng};
    held_.clear();
    buffer_.clear();
    picked_.clear();
    refill(buffered, buffer_);
    refill(picked, picked_);
  }

private:
  struct holder {
    batch value;
    int64_t left;  // rows not yet emitted
  };

  struct slot {
    holder* h;
    int64_t row;
  };

  void start_epoch(uint64_t epoch) {
    started_ = true;
    epoch_ = epoch;
    rng_ = record_rng{seed_, same_order_ ? 0 : epoch, 0};
  }

  void take_one(emitter& out) {
    auto i = static_cast<size_t>(rng_.below(buffer_.size()));
    std::swap(buffer_[i], buffer_.back());
    picked_.push_back(buffer_.back());
    buffer_.pop_back();
    if (static_cast<int64_t>(picked_.size()) == per_item_)
      emit(out);
  }

  void emit(emitter& out) {
    if (picked_.empty())
      return;
    std::vector<row_ref> rows;
    rows.reserve(picked_.size());
    for (auto& s : picked_)
      rows.push_back(row_ref{&s.h->value, s.row});
    auto b = gather_rows(rows);
    b.seq = seq_++;
    b.epoch = epoch_;
    for (auto& s : picked_)
      --s.h->left;
    picked_.clear();
    // Release items whose rows are all out (oldest first; a straggler row
    // keeps later items until it is drawn).
    while (!held_.empty() && held_.front().left == 0)
      held_.pop_front();
    out.push(std::move(b));
  }

  static batch gather(const std::vector<slot>& slots) {
    if (slots.empty())
      return batch{};
    std::vector<row_ref> rows;
    rows.reserve(slots.size());
    for (auto& s : slots)
      rows.push_back(row_ref{&s.h->value, s.row});
    return gather_rows(rows);
  }

  void refill(batch& b, std::vector<slot>& into) {
    auto n = b.records();
    if (n == 0)
      return;
    held_.push_back(holder{std::move(b), n});
    auto* h = &held_.back();
    for (int64_t r = 0; r < n; ++r)
      into.push_back(slot{h, r});
  }

  void drain(emitter& out) {
    while (!buffer_.empty())
      take_one(out);
    emit(out);
    held_.clear();
  }

  uint64_t seed_;
  int64_t buffer_size_;
  int64_t per_item_;
  bool same_order_;
  record_rng rng_;
  bool started_ = false;
  uint64_t epoch_ = 0;
  uint64_t seq_ = 0;
  std::deque<holder> held_;
  std::vector<slot> buffer_;
  std::vector<slot> picked_;
};

} // namespace

stage_type shuffle_type() {
  stage_type t;
  t.name = "shuffle";
  t.kind = stage_kind::transform;
  t.description = "shuffles records through a buffer (like tf.data shuffle)";
  t.config_block = "shuffle";
  t.config_required = {"buffer_size"};
  t.check = [](const topology::Stage& s) -> std::string {
    auto& p = s.shuffle();
    if (p.buffer_size() < 1)
      return "shuffle.buffer_size must be >= 1, got "
             + std::to_string(p.buffer_size());
    if (p.has_records_per_item() && p.records_per_item() < 1)
      return "shuffle.records_per_item must be >= 1";
    return {};
  };
  t.make = [](const stage_info& info, const topology::Stage& s) {
    return std::make_shared<shuffle>(info, shuffle_config_of(s));
  };
  return t;
}

} // namespace af
