// take and skip: pass only the first `count` records of the stream, or all
// but the first `count` (for train / validation splits). Declared in
// actors/dataset/take.hpp.
#include "actorflow/actors/dataset/take.hpp"

#include "actorflow/runtime/core/rows.hpp"
#include "actorflow/runtime/state/state_io.hpp"
#include "actorflow/runtime/topology/topology.hpp"

namespace af {

namespace {

// Rows [from, to) of `b`.
batch slice(const batch& b, int64_t from, int64_t to) {
  std::vector<row_ref> rows;
  for (auto i = from; i < to; ++i)
    rows.push_back(row_ref{&b, i});
  auto out = gather_rows(rows);
  out.seq = b.seq;
  out.epoch = b.epoch;
  return out;
}

// The options of both stages.
struct count_config {
  int64_t count = 0; // records passed (take) or dropped (skip); required
};

count_config take_config_of(const topology::Stage& s, bool take) {
  count_config c;
  c.count = take ? s.take().count() : s.skip().count();
  return c;
}

// Both stages number what they pass on 0, 1, 2, ... so that sequence
// numbers stay dense for deterministic mode although items are dropped.
class take_records : public stage_logic {
public:
  explicit take_records(int64_t count) : left_(count) {}

  void process(batch&& item, emitter& out) override {
    if (left_ <= 0)
      return;  // in flight when we asked to stop
    auto n = item.records();
    if (n <= left_) {
      left_ -= n;
    } else {
      item = slice(item, 0, left_);
      left_ = 0;
    }
    item.seq = seq_++;
    out.push(std::move(item));
    if (left_ == 0)
      out.stop_inputs();
  }

  std::string snapshot() const override {
    return save_state("take/1", left_, seq_);
  }

  void restore(const std::string& state) override {
    load_state(state, "take/1", left_, seq_);
  }

private:
  int64_t left_;
  uint64_t seq_ = 0;
};

class skip_records : public stage_logic {
public:
  explicit skip_records(int64_t count) : left_(count) {}

  void process(batch&& item, emitter& out) override {
    auto n = item.records();
    if (left_ >= n) {
      left_ -= n;
      return;
    }
    if (left_ > 0) {
      item = slice(item, left_, n);
      left_ = 0;
    }
    item.seq = seq_++;
    out.push(std::move(item));
  }

  std::string snapshot() const override {
    return save_state("skip/1", left_, seq_);
  }

  void restore(const std::string& state) override {
    load_state(state, "skip/1", left_, seq_);
  }

private:
  int64_t left_;
  uint64_t seq_ = 0;
};

stage_type make_type(const char* name, bool take) {
  stage_type t;
  t.name = name;
  t.kind = stage_kind::transform;
  t.description = take ? "passes the first `count` records of the stream"
                       : "drops the first `count` records of the stream";
  t.config_block = name;
  t.config_required = {"count"};
  t.check = [name, take](const topology::Stage& s) -> std::string {
    auto& p = take ? s.take() : s.skip();
    if (p.count() < 0)
      return std::string{name} + ".count must be >= 0, got "
             + std::to_string(p.count());
    if (replicas_of(s) != 1)
      return std::string{"a "} + name
             + " stage counts the whole stream and has one replica";
    return {};
  };
  t.make = [take](const stage_info&,
                  const topology::Stage& s) -> std::shared_ptr<stage_logic> {
    auto cfg = take_config_of(s, take);
    if (take)
      return std::make_shared<take_records>(cfg.count);
    return std::make_shared<skip_records>(cfg.count);
  };
  return t;
}

} // namespace

stage_type take_type() {
  return make_type("take", true);
}

stage_type skip_type() {
  return make_type("skip", false);
}

} // namespace af
