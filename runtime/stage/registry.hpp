// The stage-type registry: how a topology's `type: "..."` becomes code.
// Built-in stages register themselves through af::register_builtin_stages
// (actors/); embedding applications add their own the same way.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actorflow/proto/topology.pb.h"
#include <caf/actor.hpp>

#include "actorflow/runtime/protocol/service.hpp"
#include "actorflow/runtime/stage/stage.hpp"

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
  /// A lost or failed replica's unfinished input goes to the other
  /// replicas of the stage (at-least-once; one_to_one stages do this
  /// too): producers keep each item until the replica acknowledges it,
  /// once the item's work is done (stage_logic::held) and its outputs were
  /// delivered (runtime/stage/credit.hpp, pending_ack). Trainers: a batch counts
  /// as done once its push was acknowledged (docs/training.md, "Losing a
  /// trainer").
  bool resend_unfinished = false;
  /// A failed replica is logged and the job goes on as long as another
  /// replica of the stage runs or ended normally (trainers: the others keep
  /// training). The job fails when every replica failed.
  bool replicas_may_fail = false;
  /// Sources: when a replica is lost (its node), a surviving replica takes
  /// over its share of the input (stage_logic::take_over) and the job goes
  /// on; consumers close the lost replica's edge instead of failing. Its
  /// records since the last end of epoch it reported may come twice, none
  /// is left out (docs/multi-host.md).
  bool reassignable = false;
  /// Checkpoints (docs/checkpoints.md). A replica's state is taken at the
  /// cut through stage_logic::snapshot() unless `replay_on_resume` is set:
  /// then the stage and every stage upstream of it are left out of the cut
  /// and start over on resume (the evaluator reads its held-out split
  /// again; it waits for the shards, not for its input, so it could not
  /// take part in a cut anyway).
  bool replay_on_resume = false;
  /// Non-empty: a topology with checkpoints may not use this type outside
  /// a replayed branch; the text says why (shown to the user).
  std::string no_checkpoints;
  /// The stage's schema, declared once for every type: the name of its
  /// Stage.config field ("batcher"), and the fields of that block a stage
  /// must set, as paths in it ("batch_size"; "feature.input": every entry
  /// of the repeated message `feature` sets `input`, and there is at least
  /// one). A repeated field is set when it has an entry; a singular one
  /// when it is present (a proto3 scalar without `optional`: when it is
  /// not zero or empty). The fields themselves, their types and their
  /// meaning are declared in proto/topology.proto, where docs/stages.md
  /// reads them. The loader refuses a stage without the block or a
  /// required field ("needs a batcher { batch_size: N } block") before
  /// `check` runs, so `check` may read the block and need not repeat
  /// these. registry::add refuses a name that is not a field. Empty
  /// config_block: the type needs no block (it may still read one).
  std::string config_block;
  std::vector<std::string> config_required;
  /// Checks a stage's configuration; returns an empty string when it is
  /// valid, else a message (without file or line: the loader adds them).
  /// Called while a topology is loaded; an exception it throws is reported
  /// as the problem, with its message.
  std::function<std::string(const topology::Stage&)> check;
  /// Creates the logic of one replica. May throw std::exception (job::start
  /// then throws std::runtime_error naming the replica). The Stage is the
  /// loaded topology's and valid during the call only: copy what you keep.
  std::function<std::shared_ptr<stage_logic>(const stage_info&,
                                             const topology::Stage&)>
    make;
};

/// Actors a job spawns next to its stages when the topology needs them
/// (the parameter-server shards). Stages find them by name through
/// stage_info::context; the job ends them after the last stage ended, and a
/// service actor that goes down earlier fails the job.
///
/// A service actor must implement af::service_actor (runtime/protocol/service.hpp):
/// answer snapshot with its part of a checkpoint and restore with its
/// version, and take both replica_lost variants. The job asks every service
/// at each checkpoint round, on --resume and when it restores a lost one.
struct service_type {
  std::string name;
  /// How many actors this topology needs (0: the service is not used).
  /// Must not throw.
  std::function<uint32_t(const topology::Topology&)> count;
  /// Spawns actor `index` (< count), an af::service_actor: the handle is
  /// untyped because it travels as a caf::actor (job_context::service, the
  /// node spawner's answer). May throw std::exception. Runs in the
  /// coordinator's process or on the node the actor is placed on.
  std::function<caf::actor(caf::actor_system&, const topology::Topology&,
                           uint32_t index)>
    spawn;
  /// Placement: actor k runs on host hosts[k % n] (names of
  /// Topology.host); empty: in the coordinator's process.
  std::function<std::vector<std::string>(const topology::Topology&)> hosts;
};

/// A problem found by a whole-topology check: `path` names the field it is
/// about, e.g. "training.model.layer[2]" or "stage[3]", so that the loader
/// can report its line; "" reports line 1.
struct topology_problem {
  std::string path;
  std::string message;
};

/// Checks that need more than one stage (the training section against the
/// trainer and evaluator stages). An exception it throws is reported as a
/// problem on line 1.
using topology_check =
  std::function<std::vector<topology_problem>(const topology::Topology&)>;

class registry;

/// A type's config block as errors and `validate --list-types` show it,
/// with its required fields and a placeholder for each value by its type:
/// `batcher { batch_size: N }`, `numeric { feature { input: "..." op:
/// "..." } }`; "" for a type without a config block. Throws
/// std::invalid_argument for a schema that names no field (registry::add
/// checks that first).
std::string config_synopsis(const stage_type& type);

/// What `stage` misses of its type's schema: "" when it sets the config
/// block and every required field; else the message the loader reports,
/// "needs a batcher { batch_size: N } block" or "numeric.feature[1].op is
/// required (numeric { feature { input: "..." op: "..." } })".
/// Throws std::invalid_argument for a schema that names no field.
std::string missing_config(const topology::Stage& stage,
                           const stage_type& type);

/// Per stage of `spec` (topology order): whether it is replayed on resume
/// rather than cut (stage_type::replay_on_resume, and every stage upstream
/// of such a stage). Unknown types count as cut. Does not throw.
std::vector<bool> replayed_stages(const topology::Topology& spec,
                                  const registry& reg);

/// The stage types and services jobs and node spawners create actors from.
/// Fill it before the first job::start or spawn_node_spawner that uses it,
/// keep it unchanged while they run (they hold a reference, and the
/// pointers find() and list() return are invalidated by add()), and let it
/// outlive them.
class registry {
public:
  /// Adds a type; throws std::invalid_argument if the name is empty or
  /// taken, `make` is empty, or its config_block or a config_required
  /// path is not a field of the topology's Stage (a path's inner names:
  /// of message fields).
  void add(stage_type type);
  /// The type called `name`, or nullptr.
  const stage_type* find(const std::string& name) const noexcept;
  /// Every registered type, sorted by name.
  std::vector<const stage_type*> list() const;

  /// Adds a service; throws std::invalid_argument if the name is empty or
  /// taken, or `count` or `spawn` is empty.
  void add_service(service_type service);
  /// The service called `name`, or nullptr.
  const service_type* find_service(const std::string& name) const noexcept;
  const std::vector<service_type>& services() const noexcept {
    return services_;
  }
  /// Adds a whole-topology check; throws std::invalid_argument if empty.
  void add_topology_check(topology_check check);
  const std::vector<topology_check>& topology_checks() const noexcept {
    return checks_;
  }

private:
  std::vector<stage_type> types_;
  std::vector<service_type> services_;
  std::vector<topology_check> checks_;
};

} // namespace af
