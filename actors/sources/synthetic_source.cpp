// synthetic_source: generates records in memory, for demos, tests and
// benchmarks of the stream machinery without any I/O. Declared in
// actors/sources/synthetic_source.hpp.
#include "actorflow/actors/sources/synthetic_source.hpp"

#include "actorflow/actors/sources/strided_source.hpp"

#include <cstring>

namespace af {

namespace {

struct source_config {
  int64_t records = 100000; // per epoch
  int64_t record_bytes = 64; // of tensor "x" per record
  int64_t records_per_item = 64;
  int64_t epochs = 1;
  int64_t classes = 10; // of tensor "label": the record's index mod classes
};

source_config synthetic_source_config_of(const topology::Stage& s) {
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

class synthetic_source : public strided_source {
public:
  synthetic_source(const stage_info& info, source_config cfg)
    : strided_source(info, cfg.records, cfg.records_per_item, cfg.epochs),
      cfg_(cfg) {}

private:
  void fill(int64_t first, int64_t stride, int64_t n, batch& b) override {
    auto x = tensor::allocate(dtype::u8, {n, cfg_.record_bytes});
    auto label = tensor::allocate(dtype::i64, {n});
    auto* xp = x.mutable_data_as<uint8_t>();
    auto* lp = label.mutable_data_as<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      auto index = first + i * stride;
      // Cheap, seed- and index-dependent bytes: enough to detect mixing
      // and loss, not meant to be random.
      auto v = static_cast<uint8_t>((index * 131 + info().seed) & 0xff);
      std::memset(xp + i * cfg_.record_bytes, v,
                  static_cast<size_t>(cfg_.record_bytes));
      lp[i] = index % cfg_.classes;
    }
    b.set("x", std::move(x));
    b.set("label", std::move(label));
  }

  source_config cfg_;
};

std::string check_synthetic_source(const topology::Stage& s) {
  if (s.config_case() != topology::Stage::kSyntheticSource
      && s.config_case() != topology::Stage::CONFIG_NOT_SET)
    return "expects a synthetic_source { ... } block";
  auto c = synthetic_source_config_of(s);
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
  t.reassignable = true;
  t.description = "generates records in memory (tensors x: u8, label: i64)";
  t.check = check_synthetic_source;
  t.make = [](const stage_info& info, const topology::Stage& s) {
    return std::make_shared<synthetic_source>(info, synthetic_source_config_of(s));
  };
  return t;
}

} // namespace af
