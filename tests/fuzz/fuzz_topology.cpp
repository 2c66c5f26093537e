// libFuzzer target: the topology text loader (runtime/topology/topology.hpp:
// load_topology_text, the protobuf text format plus every built-in stage
// type's checks and the whole-topology checks) on arbitrary text. It must
// give a validated topology or errors naming the file and line; never a
// crash, an exception or a hang.
#include <cstdint>
#include <string>
#include <string_view>

#include "actorflow/actors/builtin.hpp"
#include "actorflow/runtime/stage/registry.hpp"
#include "actorflow/runtime/topology/topology.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const af::registry reg = [] {
    af::registry r;
    af::register_builtin_stages(r);
    return r;
  }();
  std::string_view text{reinterpret_cast<const char*>(data), size};
  auto r = af::load_topology_text(text, "fuzz.pbtxt", reg);
  if (r.ok() != r.errors.empty())
    __builtin_trap(); // a topology, or the reasons there is none
  for (auto& e : r.errors)
    if (e.file != "fuzz.pbtxt" || e.line < 0 || e.message.empty())
      __builtin_trap();
  if (r.ok()) {
    auto& t = *r.topology;
    if (t.order.size() != static_cast<size_t>(t.spec.stage_size())
        || t.stage_line.size() != t.order.size())
      __builtin_trap();
  }
  return 0;
}
