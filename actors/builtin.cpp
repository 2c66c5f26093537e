// The built-in stage types (`actorflow validate --list-types` lists them),
// the parameter-server service and the training section's checks. Declared
// in actors/builtin.hpp.
#include "actorflow/actors/builtin.hpp"

#include "actorflow/actors/dataset/batcher.hpp"
#include "actorflow/actors/dataset/cache.hpp"
#include "actorflow/actors/dataset/filter.hpp"
#include "actorflow/actors/dataset/padded_batch.hpp"
#include "actorflow/actors/dataset/shuffle.hpp"
#include "actorflow/actors/dataset/take.hpp"
#include "actorflow/actors/dataset/transform.hpp"
#include "actorflow/actors/dataset/unbatch.hpp"
#include "actorflow/actors/dataset/zip.hpp"
#include "actorflow/actors/features/example_parse.hpp"
#include "actorflow/actors/features/hash_bucket.hpp"
#include "actorflow/actors/features/image_decode.hpp"
#include "actorflow/actors/features/numeric.hpp"
#include "actorflow/actors/features/tokenize.hpp"
#include "actorflow/actors/ps_shard/ps_shard.hpp"
#include "actorflow/actors/sinks/outlet.hpp"
#include "actorflow/actors/sinks/sink.hpp"
#include "actorflow/actors/sinks/tfrecord_sink.hpp"
#include "actorflow/actors/sources/csv_source.hpp"
#include "actorflow/actors/sources/ctr_source.hpp"
#include "actorflow/actors/sources/idx_source.hpp"
#include "actorflow/actors/sources/image_folder_source.hpp"
#include "actorflow/actors/sources/synthetic_source.hpp"
#include "actorflow/actors/sources/tfrecord_source.hpp"
#include "actorflow/actors/training/evaluator.hpp"
#include "actorflow/actors/training/trainer.hpp"
#include "actorflow/actors/training/training_spec.hpp"
#include "actorflow/runtime/stage/replica_label.hpp"

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
