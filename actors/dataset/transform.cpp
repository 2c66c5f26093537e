// transform: passes items through unchanged, after optional busy work per
// record and a read of every payload byte. Declared in
// actors/dataset/transform.hpp.
#include "actorflow/actors/dataset/transform.hpp"

#include <stdexcept>

#include "actorflow/runtime/core/busy_work.hpp"
#include "actorflow/runtime/state/state_io.hpp"

namespace af {

namespace {

struct transform_config {
  int64_t work_ns_per_record = 0; // busy work, standing in for a decoder
  bool touch_payload = true; // read every byte, as a real transform would
  int64_t fail_at_item = -1; // fault injection: this item fails; -1: none
};

transform_config transform_config_of(const topology::Stage& s) {
  auto& p = s.transform();
  transform_config c;
  c.work_ns_per_record = p.work_ns_per_record();
  if (p.has_touch_payload())
    c.touch_payload = p.touch_payload();
  if (p.has_fail_at_item())
    c.fail_at_item = p.fail_at_item();
  return c;
}

class transform : public stage_logic {
public:
  explicit transform(const transform_config& cfg)
    : work_ns_(cfg.work_ns_per_record), touch_(cfg.touch_payload),
      fail_at_(cfg.fail_at_item) {}

  void process(batch&& item, emitter& out) override {
    if (seen_++ == fail_at_)
      throw std::runtime_error("fault injected at item "
                               + std::to_string(fail_at_)
                               + " (transform.fail_at_item)");
    busy_work(work_ns_ * item.records());
    if (touch_) {
      // Read every byte, as a real transform would; the sum is kept so the
      // compiler cannot drop the loop.
      for (auto& f : item.fields) {
        auto* p = reinterpret_cast<const unsigned char*>(f.value.data());
        for (size_t i = 0; i < f.value.byte_size(); ++i)
          checksum_ += p[i];
      }
    }
    out.push(std::move(item));
  }

  std::string snapshot() const override {
    return save_state("transform/1", seen_, checksum_);
  }

  void restore(const std::string& state) override {
    load_state(state, "transform/1", seen_, checksum_);
  }

private:
  int64_t work_ns_;
  bool touch_;
  int64_t fail_at_;
  int64_t seen_ = 0;
  uint64_t checksum_ = 0;
};

} // namespace

stage_type transform_type() {
  stage_type t;
  t.name = "transform";
  t.kind = stage_kind::transform;
  t.one_to_one = true;
  t.description = "passes items through after optional per-record work";
  t.check = [](const topology::Stage& s) -> std::string {
    if (s.config_case() != topology::Stage::kTransform
        && s.config_case() != topology::Stage::CONFIG_NOT_SET)
      return "expects a transform { ... } block";
    if (s.transform().work_ns_per_record() < 0)
      return "work_ns_per_record must be >= 0";
    return {};
  };
  t.make = [](const stage_info&, const topology::Stage& s) {
    return std::make_shared<transform>(transform_config_of(s));
  };
  return t;
}

} // namespace af
