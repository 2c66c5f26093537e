// Nodes: what `actorflow node` runs, and how a coordinator places stage
// replicas and service actors on one. Declared in runtime/job/node.hpp.
#include "actorflow/runtime/job/node.hpp"

#include <cerrno>
#include <cstdlib>
#include <map>
#include <stdexcept>

#include <caf/actor_system.hpp>
#include <caf/exit_reason.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <spdlog/spdlog.h>

#include "actorflow/runtime/core/census.hpp"
#include "actorflow/runtime/topology/topology.hpp"

namespace af {

caf::actor spawn_replica(caf::actor_system& sys, const registry& reg,
                         const topology::Topology& spec, int stage_index,
                         uint32_t replica,
                         std::shared_ptr<const job_context> context,
                         caf::actor coordinator) {
  auto& s = spec.stage(stage_index);
  auto* type = reg.find(s.type());
  if (type == nullptr)
    throw std::runtime_error("stage " + s.name() + ": unknown stage type '"
                             + s.type() + "'");
  auto interval = std::chrono::milliseconds{static_cast<int64_t>(
    1000
    * (spec.runtime().has_metrics_interval_s()
         ? spec.runtime().metrics_interval_s()
         : default_metrics_interval_s))};
  if (interval.count() < 1)
    interval = std::chrono::milliseconds{1};
  stage_setup setup;
  setup.info.name = s.name();
  setup.info.type = s.type();
  setup.info.replica = replica;
  setup.info.replicas = static_cast<uint32_t>(replicas_of(s));
  setup.info.seed = static_cast<uint64_t>(spec.runtime().seed());
  setup.info.context = std::move(context);
  try {
    setup.logic = type->make(setup.info, s);
  } catch (const std::exception& ex) {
    throw std::runtime_error("stage " + setup.info.label()
                             + ": cannot create: " + ex.what());
  }
  setup.coordinator = std::move(coordinator);
  setup.metrics_interval = interval;
  setup.blocking = s.has_blocking() ? s.blocking() : type->blocking;
  // One-to-one stages keep no order of their own (each replica sees a
  // subset); the stage after them restores it.
  setup.deterministic = spec.runtime().deterministic() && !type->one_to_one;
  return spawn_stage(sys, std::move(setup));
}

namespace {

struct spawner_state {
  const registry* reg = nullptr;
  // Per coordinator: what was spawned for it.
  std::map<caf::actor_addr, std::vector<caf::actor>> spawned;
  uint64_t jobs = 0;
};

using spawner_actor = node_spawner_actor::stateful_pointer<spawner_state>;

// The topology text a coordinator sent, parsed and checked again here
// (this node's registry must know every type the job uses).
topology::Topology parse(const registry& reg, const std::string& text) {
  auto loaded = load_topology_text(text, "<job topology>", reg);
  if (!loaded.ok()) {
    std::string all;
    for (auto& e : loaded.errors)
      all += (all.empty() ? "" : "; ") + e.to_string();
    throw std::runtime_error("the node cannot use the job's topology: "
                             + all);
  }
  return std::move(loaded.topology->spec);
}

void remember(spawner_actor self, const caf::actor& coordinator,
              const caf::actor& spawned) {
  auto& list = self->state.spawned[coordinator.address()];
  if (list.empty()) {
    ++self->state.jobs;
    self->monitor(coordinator);
    spdlog::info("node: serving a job of {}", caf::to_string(coordinator.node()));
  }
  list.push_back(spawned);
}

node_spawner_actor::behavior_type spawner_main(spawner_actor self,
                                               const registry* reg) {
  self->state.reg = reg;
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& spawned = self->state.spawned;
    auto it = spawned.find(dm.source);
    if (it == spawned.end())
      return;
    // The job is over (or its coordinator is gone): nothing of it stays.
    size_t alive = 0;
    for (auto& a : it->second) {
      self->send_exit(a, caf::exit_reason::user_shutdown);
      ++alive;
    }
    spdlog::info("node: job ended ({}); {} actors of it stopped",
                 dm.reason ? caf::to_string(dm.reason) : "normally", alive);
    spawned.erase(it);
  });
  return {
    [=](spawn_stage_atom, const std::string& text, uint32_t stage,
        uint32_t replica, const caf::actor& coordinator,
        const std::vector<std::string>& service_names,
        const std::vector<caf::actor>& service_actors)
      -> caf::result<caf::actor> {
      try {
        auto spec = parse(*self->state.reg, text);
        if (stage >= static_cast<uint32_t>(spec.stage_size()))
          throw std::runtime_error("no stage " + std::to_string(stage));
        auto context = std::make_shared<job_context>();
        context->system = &self->system();
        context->topology = std::make_shared<const topology::Topology>(spec);
        context->coordinator = coordinator;
        for (size_t i = 0;
             i < service_names.size() && i < service_actors.size(); ++i)
          context->services[service_names[i]].push_back(service_actors[i]);
        auto handle = spawn_replica(self->system(), *self->state.reg, spec,
                                    static_cast<int>(stage), replica,
                                    context, coordinator);
        remember(self, coordinator, handle);
        spdlog::info("node: started {}[{}]", spec.stage(static_cast<int>(stage)).name(),
                     replica);
        return handle;
      } catch (const std::exception& ex) {
        return caf::make_error(caf::sec::runtime_error, ex.what());
      }
    },
    [=](spawn_service_atom, const std::string& text,
        const std::string& service, uint32_t index,
        const caf::actor& coordinator) -> caf::result<caf::actor> {
      try {
        auto spec = parse(*self->state.reg, text);
        auto* type = self->state.reg->find_service(service);
        if (type == nullptr)
          throw std::runtime_error("unknown service '" + service + "'");
        auto handle = type->spawn(self->system(), spec, index);
        remember(self, coordinator, handle);
        spdlog::info("node: started {}[{}]", service, index);
        return handle;
      } catch (const std::exception& ex) {
        return caf::make_error(caf::sec::runtime_error, ex.what());
      }
    },
    [=](node_info_atom) {
      return "jobs served: " + std::to_string(self->state.jobs)
             + ", running: " + std::to_string(self->state.spawned.size());
    },
    [=](data_plane_atom, const std::string& secret) -> uint16_t {
      auto plane = data_plane::of(self->system());
      if (!plane)
        return 0;
      plane->accept_secret(secret);
      return plane->port();
    },
    [=](data_routes_atom, const std::vector<data_route>& routes) {
      std::vector<std::string> problems;
      auto plane = data_plane::of(self->system());
      if (!plane)
        return problems;
      plane->add_routes(routes);
      for (auto& r : routes)
        if (r.node != self->system().node())
          if (auto why = plane->probe(r); !why.empty())
            problems.push_back(r.name + ": " + why);
      return problems;
    },
  };
}

} // namespace

caf::actor spawn_node_spawner(caf::actor_system& sys, const registry& reg) {
  // Not detached: CAF 0.17 does not always join a published detached
  // actor's thread at shutdown, and a node then ignores SIGTERM. A stage
  // factory that blocks (a trainer registering with its shards) holds one
  // scheduler thread for that long.
  auto a = caf::actor_cast<caf::actor>(sys.spawn(spawner_main, &reg));
  census_add(a, "node spawner");
  return a;
}

} // namespace af
