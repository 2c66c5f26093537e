// The built-in stage types (`actorflow validate --list-types` lists them),
// the parameter-server service and the training section's checks. Declared
// in actors/builtin.hpp. The stage types are every `stage_type NAME_type()`
// that actors/ defines, listed at build time (cmake/af_stage_types.cmake)
// in builtin_stage_types.inc: a new type is not added here.
#include "actorflow/actors/builtin.hpp"

#include "actorflow/actors/ps_shard/ps_shard.hpp"
#include "actorflow/actors/training/training_spec.hpp"
#include "actorflow/runtime/stage/replica_label.hpp"

namespace af {

#define AF_STAGE_TYPE(name) stage_type name();
#include "builtin_stage_types.inc"
#undef AF_STAGE_TYPE

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
#define AF_STAGE_TYPE(name) reg.add(name());
#include "builtin_stage_types.inc"
#undef AF_STAGE_TYPE
  reg.add_topology_check(check_training);
  reg.add_service(ps_service_type());
}

} // namespace af
