// The training section of a topology (Topology.training), as the trainer,
// the evaluator and the parameter-server shards read it: the model, the
// optimizer with its defaults filled in, the shard count and staleness
// bound, and the whole-topology check that reports every problem with the
// field it is about.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actorflow/gpu/model.hpp"
#include "actorflow/gpu/optimizer.hpp"
#include "actorflow/proto/topology.pb.h"
#include "actorflow/runtime/protocol/ps.hpp"
#include "actorflow/runtime/stage/registry.hpp"

namespace af {

/// One named input of a model (TrainingModel.inputs). Its values land in
/// the model's input as the features layer takes them (gpu/layers.hpp):
/// categorical ids, offset into the one table that holds every embedding
/// table end to end, then numeric floats.
struct model_input {
  std::string field;
  int64_t width = 1;       // values per record
  std::string table;       // categorical: its table; empty: numeric
  int64_t offset = 0;      // categorical: first row of its table
  int64_t rows = 0;        // categorical: rows of its table
  bool categorical() const noexcept { return !table.empty(); }
};

/// training.model.torchscript, read (actors/training/torchscript_model.hpp).
struct torchscript_spec {
  std::string file;
  std::shared_ptr<const std::string> module; // the file's bytes
  /// forward's arguments, in the topology's order: numeric inputs, and
  /// categorical ones with their table's offset into `tables`.
  std::vector<model_input> inputs;
  int64_t embedding_dim = 0; // floats per table row
  int64_t table_rows = 0;    // every table end to end; 0: no tables
};

struct training_spec {
  gpu::model_spec model;
  std::vector<gpu::param_spec> params;
  /// A model with named inputs: the categorical ones first, then the
  /// numeric ones, each in the topology's order (`input` is then empty
  /// and model.layers starts with the features layer).
  std::vector<model_input> inputs;
  std::string input;        // batch field of the model's input
  std::string label;        // batch field of the labels
  gpu::optimizer_config optimizer;
  uint32_t shards = 1;
  std::optional<uint64_t> staleness; // nullopt: unbounded
  bool scale_lr_by_staleness = false;
  dtype wire = dtype::f32; // values of pushes and pulls (ps.wire)
  bool fail_on_nonfinite = false;
  uint32_t workers = 0;     // trainer replicas in the topology
  uint64_t seed = 0;
  /// A TorchScript model (model.layers and inputs are then empty; params
  /// are the module's variables, then "tables" when it has tables).
  std::optional<torchscript_spec> torchscript;
  bool softmax() const noexcept {
    return model.loss == "softmax_cross_entropy";
  }
};

/// Reads the training section. Throws std::invalid_argument if it is
/// invalid (check_training reports the same problems with their fields).
training_spec training_spec_of(const topology::Topology& topo);

/// Every problem of the training section and of the stages that use it.
std::vector<topology_problem> check_training(const topology::Topology& topo);

/// Whether a device spec is "cpu", "cuda" or "cuda:N".
bool valid_device_spec(const std::string& spec);

} // namespace af
