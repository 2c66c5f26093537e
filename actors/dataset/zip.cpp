// zip: pairs the records of its inputs in order, the i-th record of each
// input into one record holding the fields of all (tf.data's Dataset.zip).
// Declared in actors/dataset/zip.hpp.
#include "actorflow/actors/dataset/zip.hpp"

#include <algorithm>
#include <deque>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "actorflow/runtime/core/rows.hpp"
#include "actorflow/runtime/state/state_io.hpp"
#include "actorflow/runtime/topology/topology.hpp"

namespace af {

namespace {

struct zip_config {
  std::vector<std::string> inputs;   // stage names, in the order of `input`
  std::vector<std::string> prefixes; // one per input, or none
};

zip_config zip_config_of(const topology::Stage& s) {
  zip_config c;
  for (auto& in : s.input())
    c.inputs.push_back(in.stage());
  c.prefixes.assign(s.zip().prefix().begin(), s.zip().prefix().end());
  return c;
}

// The stage of a replica label "name[r]".
std::string_view stage_of(std::string_view label) {
  auto open = label.rfind('[');
  return open == std::string_view::npos ? label : label.substr(0, open);
}

class zip : public stage_logic {
public:
  zip(const stage_info& info, zip_config cfg)
    : cfg_(std::move(cfg)), label_(info.label()),
      waiting_(cfg_.inputs.size()), producer_(cfg_.inputs.size()) {}

  void process_from(std::string_view producer, batch&& item,
                    emitter& out) override {
    auto k = input_of(producer);
    if (item.records() == 0)
      return;
    check_rows(item);
    waiting_[k].items.push_back(std::move(item));
    waiting_[k].records += waiting_[k].items.back().records();
    pair_up(out);
  }

  void process(batch&&, emitter&) override {
    throw std::logic_error("zip: an item without its producer");
  }

  // Every input ended `epoch`: what waits from it has no partner.
  void end_of_epoch(uint64_t epoch, emitter& out) override {
    drop_through(epoch);
    pair_up(out);
  }

  void finish(emitter&) override { drop_through(UINT64_MAX); }

  // Each input's waiting items (the first cut to its unpaired rows).
  std::string snapshot() const override {
    std::vector<std::vector<batch>> held(waiting_.size());
    for (size_t k = 0; k < waiting_.size(); ++k) {
      auto& q = waiting_[k];
      for (size_t i = 0; i < q.items.size(); ++i) {
        if (i > 0 || q.offset == 0) {
          held[k].push_back(q.items[i]);
          continue;
        }
        std::vector<row_ref> rows;
        for (auto r = q.offset; r < q.items[0].records(); ++r)
          rows.push_back(row_ref{&q.items[0], r});
        auto cut = gather_rows(rows);
        cut.seq = q.items[0].seq;
        cut.epoch = q.items[0].epoch;
        held[k].push_back(std::move(cut));
      }
    }
    return save_state("zip/1", held, seq_);
  }

  void restore(const std::string& state) override {
    std::vector<std::vector<batch>> held;
    uint64_t seq = 0;
    load_state(state, "zip/1", held, seq);
    if (held.size() != waiting_.size())
      throw std::invalid_argument(
        "a damaged zip/1 state: " + std::to_string(held.size())
        + " inputs, this zip has " + std::to_string(waiting_.size()));
    std::vector<queue> waiting(waiting_.size());
    for (size_t k = 0; k < held.size(); ++k)
      for (auto& item : held[k]) {
        try {
          check_rows(item);
        } catch (const std::runtime_error& e) {
          throw std::invalid_argument(std::string{"a damaged zip/1 state: "}
                                      + e.what());
        }
        if (item.records() <= 0)
          throw std::invalid_argument("a damaged zip/1 state: an empty item");
        waiting[k].records += item.records();
        waiting[k].items.push_back(std::move(item));
      }
    waiting_ = std::move(waiting);
    seq_ = seq;
  }

private:
  struct queue {
    std::deque<batch> items;
    int64_t offset = 0;  // rows of items.front() already paired
    int64_t records = 0; // waiting rows
  };

  size_t input_of(std::string_view producer) {
    auto stage = stage_of(producer);
    for (size_t k = 0; k < cfg_.inputs.size(); ++k) {
      if (cfg_.inputs[k] != stage)
        continue;
      if (producer_[k].empty())
        producer_[k] = std::string{producer};
      else if (producer_[k] != producer)
        throw std::runtime_error(
          "zip: input '" + cfg_.inputs[k] + "' has several replicas ("
          + producer_[k] + ", " + std::string{producer}
          + "); zip pairs records in order, so each input needs one");
      return k;
    }
    throw std::runtime_error("zip: an item from '" + std::string{producer}
                             + "', which is not one of its inputs");
  }

  static std::vector<row_ref> rows_of(const queue& q, int64_t n = -1) {
    std::vector<row_ref> rows;
    auto it = q.items.begin();
    auto row = q.offset;
    for (int64_t i = 0; i < (n < 0 ? q.records : n); ++i) {
      rows.push_back(row_ref{&*it, row});
      if (++row == it->records()) {
        ++it;
        row = 0;
      }
    }
    return rows;
  }

  // The first `n` waiting records of `q`, taken out.
  static batch take(queue& q, int64_t n) {
    auto& front = q.items.front();
    batch out;
    if (q.offset == 0 && front.records() == n) {
      out = std::move(front);
      q.items.pop_front();
    } else {
      out = gather_rows(rows_of(q, n));
      q.offset += n;
      while (!q.items.empty() && q.offset >= q.items.front().records()) {
        q.offset -= q.items.front().records();
        q.items.pop_front();
      }
    }
    q.records -= n;
    return out;
  }

  // Emits as many records as every input has partners for, in the same
  // epoch (an input ahead in epochs waits until the others' epoch ends).
  void pair_up(emitter& out) {
    while (true) {
      int64_t n = -1;
      uint64_t epoch = 0;
      for (auto& q : waiting_) {
        if (q.records == 0)
          return;
        auto& front = q.items.front();
        if (n >= 0 && front.epoch != epoch)
          return;
        epoch = front.epoch;
        auto rows = front.records() - q.offset;
        n = n < 0 ? rows : std::min(n, rows);
      }
      batch result;
      for (size_t k = 0; k < waiting_.size(); ++k) {
        auto part = take(waiting_[k], n);
        for (auto& f : part.fields)
          add(result, k, std::move(f));
      }
      result.seq = seq_++;
      result.epoch = epoch;
      out.push(std::move(result));
    }
  }

  void add(batch& result, size_t k, named_tensor f) const {
    if (!cfg_.prefixes.empty()) {
      result.set(cfg_.prefixes[k] + f.name, std::move(f.value));
      return;
    }
    if (result.find(f.name) != nullptr) {
      if (f.name == "key" || f.name == "index")
        return; // the first input's
      throw std::runtime_error(
        "zip: field '" + f.name + "' comes from '" + cfg_.inputs[k]
        + "' and an input before it; give zip { prefix: [...] } one prefix "
          "per input");
    }
    result.set(f.name, std::move(f.value));
  }

  // Drops the waiting records of epochs up to `epoch`, with a warning.
  void drop_through(uint64_t epoch) {
    for (size_t k = 0; k < waiting_.size(); ++k) {
      auto& q = waiting_[k];
      int64_t dropped = 0;
      uint64_t last = 0;
      while (!q.items.empty() && q.items.front().epoch <= epoch) {
        last = q.items.front().epoch;
        dropped += q.items.front().records() - q.offset;
        q.offset = 0;
        q.items.pop_front();
      }
      if (dropped == 0)
        continue;
      q.records -= dropped;
      spdlog::warn("{}: epoch {}: {} records of '{}' had no partner and "
                   "were dropped (zip stops at its shortest input)",
                   label_, last, dropped, cfg_.inputs[k]);
    }
  }

  zip_config cfg_;
  std::string label_;
  std::vector<queue> waiting_;
  std::vector<std::string> producer_; // the replica each input came from
  uint64_t seq_ = 0;
};

std::string check_zip(const topology::Stage& s) {
  if (s.input_size() < 2)
    return "zip needs two or more inputs, got "
           + std::to_string(s.input_size());
  for (int i = 0; i < s.input_size(); ++i)
    for (int j = 0; j < i; ++j)
      if (s.input(i).stage() == s.input(j).stage())
        return "zip: input '" + s.input(i).stage() + "' is given twice";
  if (s.zip().prefix_size() != 0 && s.zip().prefix_size() != s.input_size())
    return "zip: " + std::to_string(s.zip().prefix_size())
           + " prefixes for " + std::to_string(s.input_size())
           + " inputs (give one per input, or none)";
  if (replicas_of(s) != 1)
    return "zip pairs records in order: it needs replicas: 1";
  return {};
}

} // namespace

stage_type zip_type() {
  stage_type t;
  t.name = "zip";
  t.kind = stage_kind::transform;
  t.description = "pairs the records of its inputs in order (Dataset.zip)";
  t.config_block = "zip";
  t.check = check_zip;
  t.make = [](const stage_info& info, const topology::Stage& s) {
    return std::make_shared<zip>(info, zip_config_of(s));
  };
  return t;
}

} // namespace af
