// Building a topology in code (docs/embedding.md). A pipeline is a
// topology::Topology message (proto/topology.proto, the schema of topology
// files) with a few helpers; everything a topology file can say, code can
// set through the message, and build() validates it exactly as a file is
// validated.
//
//   af::pipeline p{"my-job"};
//   p.add("read", "idx_source").mutable_idx_source()->set_images(path);
//   p.add("batch", "batcher", {"read"}).mutable_batcher()->set_batch_size(64);
//   p.add("out", "outlet", {"batch"});
//   af::loaded_topology topo = p.build(reg);   // throws topology_invalid
//
// Or from text: af::load_topology_text / af::load_topology_file
// (runtime/topology/topology.hpp), which return every problem instead of throwing.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "actorflow/proto/topology.pb.h"
#include "actorflow/runtime/stage/registry.hpp"
#include "actorflow/runtime/topology/topology.hpp"

namespace af {

/// build() found problems: what() lists each as "name:line: message" on its
/// own line (lines of text() of the pipeline); errors() has them one by one.
class topology_invalid : public std::invalid_argument {
public:
  explicit topology_invalid(std::vector<topology_error> errors);
  const std::vector<topology_error>& errors() const noexcept {
    return errors_;
  }

private:
  std::vector<topology_error> errors_;
};

/// Throws topology_invalid unless `r` holds a topology; returns it.
loaded_topology value_or_throw(load_result r);

class pipeline {
public:
  /// `name` becomes the topology's name (TensorBoard run directory,
  /// checkpoint manifests) and stands for the file in error messages.
  explicit pipeline(std::string name = "pipeline");

  /// Appends a stage fed by `inputs` (stage names, each with the default
  /// window; set Input.window on the returned stage to change it) and
  /// returns it, to set its config block, replicas, options or hosts.
  /// Nothing is checked here (names, types and inputs are checked by
  /// build()); does not throw. The reference stays valid while the
  /// pipeline lives and the stage is not removed through spec().
  topology::Stage& add(const std::string& name, const std::string& type,
                       const std::vector<std::string>& inputs = {});
  /// The first stage called `name` (the same lifetime as add()'s); throws
  /// std::out_of_range if there is none.
  topology::Stage& stage(const std::string& name);

  /// The whole message: training, runtime, hosts, checkpoint...
  topology::Topology& spec() noexcept { return spec_; }
  const topology::Topology& spec() const noexcept { return spec_; }
  topology::Training& training() { return *spec_.mutable_training(); }
  topology::Runtime& runtime() { return *spec_.mutable_runtime(); }

  /// The pipeline as topology text (protobuf text format): what build()
  /// validates, and a file `actorflow run` accepts.
  std::string text() const;

  /// Validates against `reg` (stage types, inputs, cycles, the training
  /// section...) and returns the topology for job::start. Throws
  /// topology_invalid listing every problem. The pipeline is unchanged and
  /// may be built again.
  loaded_topology build(const registry& reg) const;

private:
  topology::Topology spec_;
};

} // namespace af
