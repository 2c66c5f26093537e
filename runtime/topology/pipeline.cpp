// Building a topology in code (docs/embedding.md). Declared in
// runtime/topology/pipeline.hpp.
#include "actorflow/runtime/topology/pipeline.hpp"

#include <google/protobuf/text_format.h>

namespace af {

namespace {

std::string describe(const std::vector<topology_error>& errors) {
  std::string text;
  for (auto& e : errors) {
    if (!text.empty())
      text += '\n';
    text += e.to_string();
  }
  return text.empty() ? std::string{"invalid topology"} : text;
}

} // namespace

topology_invalid::topology_invalid(std::vector<topology_error> errors)
  : std::invalid_argument{describe(errors)}, errors_{std::move(errors)} {}

loaded_topology value_or_throw(load_result r) {
  if (!r.ok())
    throw topology_invalid{std::move(r.errors)};
  return std::move(*r.topology);
}

pipeline::pipeline(std::string name) {
  spec_.set_name(std::move(name));
}

topology::Stage& pipeline::add(const std::string& name,
                               const std::string& type,
                               const std::vector<std::string>& inputs) {
  auto* s = spec_.add_stage();
  s->set_name(name);
  s->set_type(type);
  for (auto& in : inputs)
    s->add_input()->set_stage(in);
  return *s;
}

topology::Stage& pipeline::stage(const std::string& name) {
  for (auto& s : *spec_.mutable_stage())
    if (s.name() == name)
      return s;
  throw std::out_of_range("pipeline '" + spec_.name() + "' has no stage '"
                          + name + "'");
}

std::string pipeline::text() const {
  std::string out;
  google::protobuf::TextFormat::PrintToString(spec_, &out);
  return out;
}

loaded_topology pipeline::build(const registry& reg) const {
  auto name = spec_.name().empty() ? std::string{"pipeline"} : spec_.name();
  if (spec_.stage_size() == 0)
    throw topology_invalid{
      {topology_error{name, 0, "the pipeline has no stage"}}};
  return value_or_throw(load_topology_text(text(), name, reg));
}

} // namespace af
