#include "actors/synthetic_source.hpp"

#include <cstring>

namespace af {

namespace {

struct source_config {
  int64_t records = 100000;
  int64_t record_bytes = 64;
  int64_t records_per_item = 64;
  int64_t epochs = 1;
  int64_t classes = 10;
};

source_config config_of(const topology::Stage& s) {
  source_config c;
  auto& p = s.synthetic_source();
  if (p.has_records())
    c.records = p.records();
  if (p.has_record_bytes())
    c.record_bytes = p.record_bytes();
  if (p.has_records_per_item())
    c.records_per_item = p.records_per_item();
  if (p.has_epochs())
    c.epochs = p.epochs();
  if (p.has_classes())
    c.classes = p.classes();
  return c;
}

class synthetic_source : public stage_logic {
public:
  synthetic_source(const stage_info& info, source_config cfg)
    : info_(info), cfg_(cfg), next_(info.replica) {}

  bool produce(emitter& out) override {
    if (epoch_ >= static_cast<uint64_t>(cfg_.epochs))
      return false;
    auto stride = static_cast<int64_t>(info_.replicas);
    // Records of this replica left in the epoch.
    int64_t left =
      next_ < cfg_.records ? (cfg_.records - next_ + stride - 1) / stride : 0;
    auto n = std::min(left, cfg_.records_per_item);
    if (n > 0) {
      auto x = tensor::allocate(dtype::u8, {n, cfg_.record_bytes});
      auto label = tensor::allocate(dtype::i64, {n});
      auto* xp = x.mutable_data_as<uint8_t>();
      auto* lp = label.mutable_data_as<int64_t>();
      for (int64_t i = 0; i < n; ++i) {
        auto index = next_ + i * stride;
        // Cheap, seed- and index-dependent bytes: enough to detect mixing
        // and loss, not meant to be random.
        auto v = static_cast<uint8_t>((index * 131 + info_.seed) & 0xff);
        std::memset(xp + i * cfg_.record_bytes, v,
                    static_cast<size_t>(cfg_.record_bytes));
        lp[i] = index % cfg_.classes;
      }
      next_ += n * stride;
      batch b;
      b.seq = seq_++;
      b.epoch = epoch_;
      b.set("x", std::move(x));
      b.set("label", std::move(label));
      out.push(std::move(b));
    }
    if (next_ >= cfg_.records) {
      out.end_epoch(epoch_);
      ++epoch_;
      next_ = info_.replica;
    }
    return epoch_ < static_cast<uint64_t>(cfg_.epochs);
  }

private:
  stage_info info_;
  source_config cfg_;
  int64_t next_;
  uint64_t epoch_ = 0;
  uint64_t seq_ = 0;
};

std::string check(const topology::Stage& s) {
  if (s.config_case() != topology::Stage::kSyntheticSource
      && s.config_case() != topology::Stage::CONFIG_NOT_SET)
    return "expects a synthetic_source { ... } block";
  auto c = config_of(s);
  if (c.records < 0)
    return "records must be >= 0";
  if (c.record_bytes < 1)
    return "record_bytes must be >= 1";
  if (c.records_per_item < 1)
    return "records_per_item must be >= 1";
  if (c.epochs < 1)
    return "epochs must be >= 1";
  if (c.classes < 1)
    return "classes must be >= 1";
  return {};
}

} // namespace

stage_type synthetic_source_type() {
  stage_type t;
  t.name = "synthetic_source";
  t.kind = stage_kind::source;
  t.description = "generates records in memory (tensors x: u8, label: i64)";
  t.check = check;
  t.make = [](const stage_info& info, const topology::Stage& s) {
    return std::make_shared<synthetic_source>(info, config_of(s));
  };
  return t;
}

} // namespace af
