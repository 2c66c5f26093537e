#include "actors/builtin.hpp"

#include "actors/batcher.hpp"
#include "actors/cache.hpp"
#include "actors/csv_source.hpp"
#include "actors/ctr_source.hpp"
#include "actors/evaluator.hpp"
#include "actors/example_parse.hpp"
#include "actors/filter.hpp"
#include "actors/hash_bucket.hpp"
#include "actors/numeric.hpp"
#include "actors/unbatch.hpp"
#include "actors/padded_batch.hpp"
#include "actors/tfrecord_sink.hpp"
#include "actors/tokenize.hpp"
#include "actors/zip.hpp"
#include "actors/idx_source.hpp"
#include "actors/ps_shard.hpp"
#include "actors/image_folder_source.hpp"
#include "actors/image_decode.hpp"
#include "actors/shuffle.hpp"
#include "actors/outlet.hpp"
#include "actors/sink.hpp"
#include "actors/synthetic_source.hpp"
#include "actors/take.hpp"
#include "actors/tfrecord_source.hpp"
#include "actors/trainer.hpp"
#include "actors/training_spec.hpp"
#include "actors/transform.hpp"
#include "runtime/replica_label.hpp"

namespace af {

namespace {

// The parameter-server shards of a training job, one service.
service_type ps_service_type() {
  service_type s;
  s.name = ps_service;
  s.count = [](const topology::Topology& topo) -> uint32_t {
    for (auto& stage : topo.stage())
      if (stage.type() == "trainer")
        return training_spec_of(topo).shards;
    return 0;
  };
  s.spawn = [](caf::actor_system& sys, const topology::Topology& topo,
               uint32_t k) {
    auto spec = training_spec_of(topo);
    ps_shard_config cfg;
    cfg.shard = k;
    cfg.shards = spec.shards;
    cfg.params = spec.params;
    cfg.optimizer = spec.optimizer;
    cfg.staleness = spec.staleness;
    cfg.scale_lr_by_staleness = spec.scale_lr_by_staleness;
    cfg.wire = spec.wire;
    cfg.expected_workers = spec.workers;
    cfg.seed = spec.seed;
    cfg.name = replica_label(std::string{ps_service}, k);
    for (auto& stage : topo.stage())
      if (stage.type() == "trainer")
        cfg.worker_stage = stage.name();
    return spawn_ps_shard(sys, std::move(cfg));
  };
  s.hosts = [](const topology::Topology& topo) {
    auto& h = topo.training().ps().hosts();
    return std::vector<std::string>(h.begin(), h.end());
  };
  return s;
}

} // namespace

void register_builtin_stages(registry& reg) {
  reg.add(synthetic_source_type());
  reg.add(transform_type());
  reg.add(batcher_type());
  reg.add(sink_type());
  reg.add(outlet_type());
  reg.add(tfrecord_source_type());
  reg.add(idx_source_type());
  reg.add(example_parse_type());
  reg.add(image_decode_type());
  reg.add(shuffle_type());
  reg.add(cache_type());
  reg.add(take_type());
  reg.add(filter_type());
  reg.add(unbatch_type());
  reg.add(padded_batch_type());
  reg.add(tfrecord_sink_type());
  reg.add(tokenize_type());
  reg.add(hash_bucket_type());
  reg.add(numeric_type());
  reg.add(zip_type());
  reg.add(skip_type());
  reg.add(csv_source_type());
  reg.add(image_folder_source_type());
  reg.add(ctr_source_type());
  reg.add(trainer_type());
  reg.add(evaluator_type());
  reg.add_topology_check(check_training);
  reg.add_service(ps_service_type());
}

} // namespace af
