#include "runtime/registry.hpp"

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

} // namespace af
