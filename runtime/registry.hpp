// The stage-type registry: how a topology's `type: "..."` becomes code.
// Built-in stages register themselves through af::register_builtin_stages
// (actors/); embedding applications add their own the same way.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "proto/topology.pb.h"
#include "runtime/stage.hpp"

namespace af {

enum class stage_kind {
  source,    // no inputs, produces items
  transform, // inputs and a consumer
  sink,      // inputs, no consumer
};

const char* to_string(stage_kind k) noexcept;

struct stage_type {
  std::string name;
  stage_kind kind = stage_kind::transform;
  std::string description;
  /// Spawn replicas as detached actors (own thread) unless the topology
  /// says otherwise: for stages that block on I/O or long computations.
  bool blocking = false;
  /// Emits exactly one item per input item with the input's sequence
  /// number (parse, decode): such stages may have several replicas in
  /// deterministic mode.
  bool one_to_one = false;
  /// Checks a stage's configuration; returns an empty string when it is
  /// valid, else a message (without file or line: the loader adds them).
  std::function<std::string(const topology::Stage&)> check;
  /// Creates the logic of one replica. May throw std::exception.
  std::function<std::shared_ptr<stage_logic>(const stage_info&,
                                             const topology::Stage&)>
    make;
};

class registry {
public:
  /// Adds a type; throws std::invalid_argument if the name is taken or
  /// `make` is empty.
  void add(stage_type type);
  /// The type called `name`, or nullptr.
  const stage_type* find(const std::string& name) const noexcept;
  /// Every registered type, sorted by name.
  std::vector<const stage_type*> list() const;

private:
  std::vector<stage_type> types_;
};

} // namespace af
