// Writing your own stage type (docs/embedding.md). The runtime already
// speaks the stream protocol for every stage: it grants and spends credit,
// forwards end_of_epoch and end_of_stream, and turns an exception into a
// stream_error that names the replica. A custom stage only says what to do
// with an item, through one of:
//
//   // A one-to-one transform (a user decoder), options read once per replica:
//   reg.add(af::map_stage("scale", "multiplies 'x' by a factor", {"factor"},
//     [](const af::stage_info&, const af::stage_options& o) {
//       auto factor = o.get_double("factor", 1.0);
//       return [factor](af::batch&& b) { ...; return std::move(b); };
//     }));
//
//   // Any stage_logic subclass (sources, sinks, stateful stages):
//   reg.add(af::stage_type_of<my_source>("my_source", af::stage_kind::source,
//                                        "reads my files", {"path"}));
//
// In a topology the stage is configured with `options { key: ".." value: ".." }`:
//   stage { name: "scale" type: "scale" input { stage: "read" }
//           options { key: "factor" value: "0.5" } }
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actorflow/runtime/stage/registry.hpp"

namespace af {

/// Typed access to a stage's `options` map. Every getter throws
/// std::invalid_argument with a message naming the option when a value does
/// not parse; the runtime reports it as the stage's error (with the topology
/// file's line when it happens while the topology is loaded).
/// Holds a reference to the stage, which the runtime keeps alive only
/// during the factory or constructor it is handed to: read the options
/// there and keep the values, not the stage_options.
class stage_options {
public:
  explicit stage_options(const topology::Stage& stage) : stage_{&stage} {}

  bool has(const std::string& key) const;
  /// The value, or `fallback` when the option is not set.
  std::string get(const std::string& key, std::string fallback = {}) const;
  /// The value; throws std::invalid_argument when the option is not set.
  std::string require(const std::string& key) const;
  /// Whole decimal numbers ("-3", "65536").
  int64_t get_int(const std::string& key, int64_t fallback) const;
  /// Decimal or scientific ("0.5", "1e-3"); must be finite.
  double get_double(const std::string& key, double fallback) const;
  /// "true"/"false"/"1"/"0".
  bool get_bool(const std::string& key, bool fallback) const;
  /// Throws std::invalid_argument naming the first option that is not in
  /// `known`, and listing the known ones (a typo must not silently keep a
  /// default).
  void only(const std::vector<std::string>& known) const;

private:
  const topology::Stage* stage_;
};

/// A one-to-one stage: each input batch becomes one output batch; the
/// runtime keeps the input's sequence number and epoch on the output, so
/// the stage may have several replicas, also in deterministic mode.
/// Throwing std::exception fails the replica (af::input_error: bad data,
/// which ends the job).
using map_fn = std::function<batch(batch&&)>;

/// Makes one replica's function from its identity and options; called once
/// per replica when the job starts (on the thread that calls job::start),
/// and once while the topology is loaded, to check the options (that call's
/// stage_info has only name and type set: replica 0, no context). Both
/// arguments are valid during the call only: the returned function must
/// capture values, not them. Throw std::invalid_argument for a bad option;
/// returning an empty function is reported as a problem too.
using map_factory =
  std::function<map_fn(const stage_info&, const stage_options&)>;

/// The stage type `name` running `make`'s function on every item.
/// `known_options`: the option keys the stage reads (others are an error
/// when the topology is loaded). `blocking`: give each replica its own
/// thread (long computations or I/O per item). Throws std::invalid_argument
/// when `make` is empty; add the result with registry::add.
stage_type map_stage(std::string name, std::string description,
                     std::vector<std::string> known_options, map_factory make,
                     bool blocking = false);

/// The stage type `name` whose replicas are `Logic` objects, constructed
/// as Logic(const stage_info&, const stage_options&) when the job starts
/// (both arguments valid during the constructor only). `Logic` derives
/// from af::stage_logic (runtime/stage/stage.hpp says which calls it may override
/// and on which thread they run). Unknown option keys are found when the
/// topology is loaded; Logic is not constructed then, so a bad option
/// value (the constructor throwing) fails job::start with
/// std::runtime_error naming the replica. The returned stage_type may be
/// adjusted before registry::add (blocking, replicas_may_fail...).
template <class Logic>
stage_type stage_type_of(std::string name, stage_kind kind,
                         std::string description,
                         std::vector<std::string> known_options = {}) {
  static_assert(std::is_base_of_v<stage_logic, Logic>,
                "stage_type_of<Logic>: Logic must derive from af::stage_logic");
  stage_type t;
  t.name = std::move(name);
  t.kind = kind;
  t.description = std::move(description);
  t.check = [known = known_options](const topology::Stage& s) -> std::string {
    try {
      stage_options{s}.only(known);
    } catch (const std::exception& ex) {
      return ex.what();
    }
    return {};
  };
  t.make = [](const stage_info& info, const topology::Stage& s) {
    return std::shared_ptr<stage_logic>{
      std::make_shared<Logic>(info, stage_options{s})};
  };
  return t;
}

} // namespace af
