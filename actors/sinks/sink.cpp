// sink: the end of a stream. Declared in actors/sinks/sink.hpp.
#include "actorflow/actors/sinks/sink.hpp"

#include <memory>

#include "actorflow/actors/sinks/record_id_log.hpp"
#include "actorflow/runtime/core/busy_work.hpp"
#include "actorflow/runtime/state/state_io.hpp"
#include "actorflow/runtime/topology/topology.hpp"

namespace af {

namespace {

struct sink_config {
  int64_t work_ns_per_item = 0; // busy work, to model a slow consumer
  std::string record_ids; // file listing the records consumed; empty: off
  std::string record_id_field = "index"; // the batch field of their ids
};

sink_config sink_config_of(const topology::Stage& s) {
  auto& p = s.sink();
  sink_config c;
  c.work_ns_per_item = p.work_ns_per_item();
  c.record_ids = p.record_ids();
  if (!p.record_id_field().empty())
    c.record_id_field = p.record_id_field();
  return c;
}

class sink : public stage_logic {
public:
  sink(const stage_info& info, const sink_config& cfg)
    : work_ns_(cfg.work_ns_per_item) {
    if (!cfg.record_ids.empty())
      ids_ = std::make_unique<record_id_log>(
        cfg.record_ids, cfg.record_id_field, info.replica, info.label());
  }

  void process(batch&& item, emitter&) override {
    busy_work(work_ns_);
    ++items_;
    if (ids_) {
      ids_->take(item, scratch_);
      ids_->write(items_, item.epoch, scratch_);
    }
  }

  void finish(emitter&) override {
    if (ids_)
      ids_->close();
  }

  // Only a sink that lists record ids keeps a position (its item count, so
  // that a resumed job cuts its file at the checkpoint).
  std::string snapshot() const override {
    return ids_ ? save_state("sink/1", items_) : std::string{};
  }

  void restore(const std::string& state) override {
    if (state.empty())
      return;
    load_state(state, "sink/1", items_);
    if (ids_)
      ids_->restore(items_);
  }

private:
  int64_t work_ns_;
  uint64_t items_ = 0;
  std::unique_ptr<record_id_log> ids_; // null: record ids not listed
  std::vector<int64_t> scratch_;
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
    if (!s.sink().record_ids().empty())
      return record_id_log::check(s.sink().record_ids(), replicas_of(s));
    return {};
  };
  t.make = [](const stage_info& info, const topology::Stage& s) {
    return std::make_shared<sink>(info, sink_config_of(s));
  };
  return t;
}

} // namespace af
