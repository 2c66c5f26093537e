// The stage-type registry: how a topology's `type: "..."` becomes code.
// Declared in runtime/stage/registry.hpp.
#include "actorflow/runtime/stage/registry.hpp"

#include <algorithm>
#include <stdexcept>

namespace af {

const char* to_string(stage_kind k) noexcept {
  switch (k) {
    case stage_kind::source:
      return "source";
    case stage_kind::transform:
      return "transform";
    case stage_kind::sink:
      return "sink";
  }
  return "?";
}

void registry::add(stage_type type) {
  if (type.name.empty() || !type.make)
    throw std::invalid_argument("stage type needs a name and a factory");
  if (find(type.name) != nullptr)
    throw std::invalid_argument("stage type '" + type.name
                                + "' is already registered");
  types_.push_back(std::move(type));
}

const stage_type* registry::find(const std::string& name) const noexcept {
  for (auto& t : types_)
    if (t.name == name)
      return &t;
  return nullptr;
}

const service_type*
registry::find_service(const std::string& name) const noexcept {
  for (auto& s : services_)
    if (s.name == name)
      return &s;
  return nullptr;
}

std::vector<const stage_type*> registry::list() const {
  std::vector<const stage_type*> out;
  for (auto& t : types_)
    out.push_back(&t);
  std::sort(out.begin(), out.end(),
            [](auto* a, auto* b) { return a->name < b->name; });
  return out;
}

void registry::add_service(service_type service) {
  if (service.name.empty() || !service.count || !service.spawn)
    throw std::invalid_argument("a service needs a name, count and spawn");
  for (auto& s : services_)
    if (s.name == service.name)
      throw std::invalid_argument("service '" + service.name
                                  + "' is already registered");
  services_.push_back(std::move(service));
}

void registry::add_topology_check(topology_check check) {
  if (!check)
    throw std::invalid_argument("empty topology check");
  checks_.push_back(std::move(check));
}

std::vector<bool> replayed_stages(const topology::Topology& spec,
                                  const registry& reg) {
  auto n = spec.stage_size();
  std::vector<bool> replayed(static_cast<size_t>(n), false);
  for (int i = 0; i < n; ++i) {
    auto* type = reg.find(spec.stage(i).type());
    replayed[static_cast<size_t>(i)] = type != nullptr && type->replay_on_resume;
  }
  // Upstream of a replayed stage is replayed: follow inputs until nothing
  // changes (topologies are small; n passes at most).
  for (bool changed = true; changed;) {
    changed = false;
    for (int i = 0; i < n; ++i) {
      if (!replayed[static_cast<size_t>(i)])
        continue;
      for (auto& in : spec.stage(i).input())
        for (int j = 0; j < n; ++j)
          if (spec.stage(j).name() == in.stage()
              && !replayed[static_cast<size_t>(j)]) {
            replayed[static_cast<size_t>(j)] = true;
            changed = true;
          }
    }
  }
  return replayed;
}

} // namespace af
