#include "actors/sink.hpp"

#include "runtime/busy_work.hpp"

namespace af {

namespace {

class sink : public stage_logic {
public:
  explicit sink(int64_t work_ns) : work_ns_(work_ns) {}

  void process(batch&&, emitter&) override { busy_work(work_ns_); }

private:
  int64_t work_ns_;
};

} // namespace

stage_type sink_type() {
  stage_type t;
  t.name = "sink";
  t.kind = stage_kind::sink;
  t.description = "consumes and counts items";
  t.check = [](const topology::Stage& s) -> std::string {
    if (s.config_case() != topology::Stage::kSink
        && s.config_case() != topology::Stage::CONFIG_NOT_SET)
      return "expects a sink { ... } block";
    if (s.sink().work_ns_per_item() < 0)
      return "work_ns_per_item must be >= 0";
    return {};
  };
  t.make = [](const stage_info&, const topology::Stage& s) {
    return std::make_shared<sink>(s.sink().work_ns_per_item());
  };
  return t;
}

} // namespace af
