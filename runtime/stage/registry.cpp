// The stage-type registry: how a topology's `type: "..."` becomes code.
// Declared in runtime/stage/registry.hpp.
#include "actorflow/runtime/stage/registry.hpp"

#include <algorithm>
#include <stdexcept>

#include <google/protobuf/descriptor.h>

namespace af {

namespace {

namespace pb = google::protobuf;

// The schema's paths as a tree: each field of a block, in the order the
// type names them, with the paths below it.
struct schema_node {
  const pb::FieldDescriptor* field = nullptr;
  std::vector<schema_node> inner;
};

std::vector<schema_node> schema_of(const pb::Descriptor* block,
                                   const std::vector<std::string>& paths,
                                   const std::string& type_name) {
  std::vector<schema_node> nodes;
  std::vector<std::vector<std::string>> inner_paths;
  for (auto& path : paths) {
    auto dot = path.find('.');
    auto head = path.substr(0, dot);
    auto* field = block->FindFieldByName(head);
    if (field == nullptr)
      throw std::invalid_argument("stage type '" + type_name + "': "
                                  + block->name() + " has no field '" + head
                                  + "' (config_required \"" + path + "\")");
    size_t k = 0;
    while (k < nodes.size() && nodes[k].field != field)
      ++k;
    if (k == nodes.size()) {
      nodes.push_back({field, {}});
      inner_paths.emplace_back();
    }
    if (dot == std::string::npos)
      continue;
    if (field->message_type() == nullptr)
      throw std::invalid_argument("stage type '" + type_name + "': "
                                  + block->name() + "." + head
                                  + " is not a message (config_required \""
                                  + path + "\")");
    inner_paths[k].push_back(path.substr(dot + 1));
  }
  for (size_t k = 0; k < nodes.size(); ++k)
    if (!inner_paths[k].empty())
      nodes[k].inner = schema_of(nodes[k].field->message_type(),
                                 inner_paths[k], type_name);
  return nodes;
}

// The config block's field of topology::Stage, a message field.
const pb::FieldDescriptor* block_field(const stage_type& type) {
  auto* field =
    topology::Stage::descriptor()->FindFieldByName(type.config_block);
  if (field == nullptr || field->message_type() == nullptr)
    throw std::invalid_argument("stage type '" + type.name + "': Stage has "
                                "no config block '" + type.config_block
                                + "'");
  return field;
}

std::string placeholder(const pb::FieldDescriptor& f) {
  using T = pb::FieldDescriptor;
  switch (f.cpp_type()) {
    case T::CPPTYPE_STRING:
      return "\"...\"";
    case T::CPPTYPE_BOOL:
      return "true";
    case T::CPPTYPE_FLOAT:
    case T::CPPTYPE_DOUBLE:
      return "X";
    case T::CPPTYPE_ENUM:
      return "NAME";
    case T::CPPTYPE_MESSAGE:
      return "{ ... }";
    default:
      return "N";
  }
}

std::string synopsis(const std::vector<schema_node>& nodes) {
  std::string out;
  for (auto& n : nodes) {
    out += n.field->name();
    if (n.field->message_type() == nullptr)
      out += ": " + placeholder(*n.field);
    else if (n.inner.empty())
      out += " { ... }";
    else
      out += " { " + synopsis(n.inner) + " }";
    out += " ";
  }
  if (!out.empty())
    out.pop_back();
  return out;
}

// The first required path `m` does not set, as "feature[1].op"; "" when
// it sets them all.
std::string first_unset(const pb::Message& m,
                        const std::vector<schema_node>& nodes) {
  auto* r = m.GetReflection();
  for (auto& n : nodes) {
    auto& name = n.field->name();
    if (n.field->is_repeated()) {
      auto size = r->FieldSize(m, n.field);
      if (size == 0)
        return name;
      for (int i = 0; i < size && !n.inner.empty(); ++i) {
        auto miss = first_unset(r->GetRepeatedMessage(m, n.field, i), n.inner);
        if (!miss.empty())
          return name + "[" + std::to_string(i) + "]." + miss;
      }
      continue;
    }
    // HasField: present, or for a proto3 scalar without `optional`, not
    // its zero value.
    if (!r->HasField(m, n.field))
      return name;
    if (!n.inner.empty()) {
      auto miss = first_unset(r->GetMessage(m, n.field), n.inner);
      if (!miss.empty())
        return name + "." + miss;
    }
  }
  return {};
}

} // namespace

std::string config_synopsis(const stage_type& type) {
  if (type.config_block.empty())
    return {};
  auto* field = block_field(type);
  auto inner = synopsis(
    schema_of(field->message_type(), type.config_required, type.name));
  return type.config_block + (inner.empty() ? " { }" : " { " + inner + " }");
}

std::string missing_config(const topology::Stage& stage,
                           const stage_type& type) {
  if (type.config_block.empty())
    return {};
  auto* field = block_field(type);
  auto* r = stage.GetReflection();
  if (!r->HasField(stage, field))
    return "needs a " + config_synopsis(type) + " block";
  auto miss =
    first_unset(r->GetMessage(stage, field),
                schema_of(field->message_type(), type.config_required,
                          type.name));
  if (miss.empty())
    return {};
  return type.config_block + "." + miss + " is required ("
         + config_synopsis(type) + ")";
}

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
  if (!type.config_block.empty())
    schema_of(block_field(type)->message_type(), type.config_required,
              type.name);
  else if (!type.config_required.empty())
    throw std::invalid_argument("stage type '" + type.name
                                + "': config_required without a "
                                  "config_block");
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
