// A stage: the piece of user (or built-in) code that runs inside one stage
// replica actor. The runtime owns the actor, the edges, the credit and the
// shutdown; a stage only says what to do with one item.
//
//   class my_stage : public af::stage_logic {
//     void process(af::batch&& in, af::emitter& out) override {
//       out.push(transform(std::move(in)));
//     }
//   };
//
// Rules:
// - produce/process/end_of_epoch/finish run one at a time on the replica's
//   actor; no locking needed inside a stage.
// - A stage that blocks (file I/O, long BLAS or GPU calls) is spawned
//   `blocking` (a detached actor with its own thread), so that it never stalls
//   CAF's scheduler. Other stages keep each call short.
// - Throwing std::exception from any of them fails the replica: its message
//   becomes a stream_error with the replica's name that ends the job.
//   Throw af::input_error when the data itself is bad: it ends the job even
//   for stage types whose replicas may fail (another replica would meet the
//   same data).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "actorflow/runtime/core/batch.hpp"
#include "actorflow/runtime/protocol/stage_stats.hpp"

namespace af {

namespace topology {
class Topology;
} // namespace topology

/// What a job shares with every stage it creates: the actor system, the
/// whole topology (a trainer reads the model from it) and the actors of the
/// job's services (the parameter-server shards), by service name, and the
/// job's coordinator (which knows where a lost service actor was restored:
/// ps_locate_atom in runtime/protocol/ps.hpp).
struct job_context {
  /// The system the job runs in (not owned; it outlives the job's actors).
  caf::actor_system* system = nullptr;
  std::shared_ptr<const topology::Topology> topology;
  std::map<std::string, std::vector<caf::actor>> services;
  caf::actor coordinator;
  /// The application's actors for the job's `outlet` stages, by stage name
  /// (job_options::outlets); empty on nodes.
  std::map<std::string, caf::actor> outlets;
  /// The service's actors, or an empty list (valid while the context lives).
  const std::vector<caf::actor>& service(const std::string& name) const;
};

/// Where a stage's output goes. Pushed items are queued and sent as the
/// consumers' credit allows; the runtime does not call process() again while
/// output is still queued, so a stage's own buffering stays bounded.
/// The emitter handed to a stage_logic call is valid during that call only.
class emitter {
public:
  virtual ~emitter();
  /// Queues `item` for the consumers. Throws std::logic_error in a sink (a
  /// stage without consumers).
  virtual void push(batch item) = 0;
  /// Sources: ends epoch `epoch` after every item pushed so far. Other
  /// stages need not call it: the runtime forwards end_of_epoch itself.
  virtual void end_epoch(uint64_t epoch) = 0;
  /// The stage needs no more input (take): the producers upstream are asked
  /// to stop; what is already in flight still arrives, then end of stream.
  virtual void stop_inputs() {}
  /// Sends the replica's stats, with metrics() and take_histograms(), to
  /// the coordinator now instead of at the next report (every
  /// runtime.metrics_interval_s, which a replica can only make between
  /// calls): for a stage that works long inside one call and whose
  /// metrics change meanwhile (the evaluator evaluates many times in
  /// finish()). Does not throw.
  virtual void report_metrics() {}
};

/// Identity of one replica, handed to the stage's factory.
struct stage_info {
  std::string name; // stage name from the topology
  std::string type; // registered type
  uint32_t replica = 0;
  uint32_t replicas = 1;
  uint64_t seed = 0;
  /// Set by af::job; null when a stage is created outside a job (tests).
  std::shared_ptr<const job_context> context;
  /// "name[replica]", how logs and errors name the replica.
  std::string label() const;
};

class stage_logic {
public:
  virtual ~stage_logic();
  /// Sources: push at most a few items and return true, or return false
  /// once the stream is complete. Called whenever a consumer has credit and
  /// nothing is queued. Other stages are called the same way after all
  /// their inputs ended (before finish), so that they can go on producing
  /// (a cache replaying epochs); the default returns false at once.
  virtual bool produce(emitter& out);
  /// Consumes one item. Default: drops it (sources never get one).
  virtual void process(batch&& item, emitter& out);
  /// The runtime's entry: `item` came from replica `producer` ("name[r]",
  /// or the stage name alone). For stages that tell their inputs apart
  /// (zip). Default: process(item, out).
  virtual void process_from(std::string_view producer, batch&& item,
                            emitter& out);
  /// Epoch `epoch` ended on every input; called before the runtime forwards
  /// the marker (a batcher flushes its remainder here).
  virtual void end_of_epoch(uint64_t epoch, emitter& out);
  /// Every input ended (or a source returned false / was stopped); last
  /// chance to push before end_of_stream goes downstream.
  virtual void finish(emitter& out);
  /// The stage's position (reader offsets, RNG state...) as an opaque
  /// string, for checkpoints; empty for stateless stages.
  virtual std::string snapshot() const;
  /// Continues from a snapshot(); throws std::invalid_argument if `state`
  /// is not one of this stage's snapshots.
  virtual void restore(const std::string& state);
  /// Sources of a stage_type::reassignable type: replica `replica` of this
  /// stage was lost after it had ended `from_epoch` epochs; from now on
  /// this replica also produces that replica's share of every epoch from
  /// `from_epoch` on (the share of epochs this replica is already past is
  /// produced in its current epoch). Default: throws std::logic_error.
  virtual void take_over(uint32_t replica, uint64_t from_epoch);
  /// Checkpoints: the stream is cut here (every input delivered the
  /// barrier and every item before it was processed). Finish the work of
  /// the items received so far, so that snapshot() plus what was pushed
  /// downstream or to the shards hold all of it (a trainer trains its
  /// staged batch and pauses at the shards). Returns the stage's step
  /// count (trainers), else 0. Default: nothing to do, 0.
  virtual uint64_t quiesce();
  /// After a checkpoint was written, or once restored at the start of a
  /// resumed job: continue (a trainer rejoins the shards' clocks).
  /// Default: nothing.
  virtual void resume();
  /// Input items process() took whose work is not done yet (a trainer's
  /// staged batch, and the one whose push is not yet acknowledged): their
  /// credit goes back only once they are done, so that on an input that
  /// re-sends (stage_type::resend_unfinished) the producer still holds
  /// them if this replica is lost. The oldest finish first. Outputs made
  /// for them when they finish (release(), finish()) are not waited for
  /// before the producer forgets them, as outputs made by process() are
  /// (runtime/stage/credit.hpp, pending_ack). Default: 0.
  virtual size_t held() const;
  /// The most held() can be; such an input's window grows by it, so that
  /// the held items do not take the window's prefetch. Default: 0.
  virtual size_t most_held() const;
  /// Finish the held items' work now: a producer waits for their credit
  /// (the logic holds more than most_held(), and the window is used up;
  /// held items' bytes are credited as they come, so a byte budget never
  /// waits). Default: nothing.
  virtual void release(emitter& out);
  /// Adds the stage's own metrics (loss, accuracy...) to `out`; called on
  /// the replica's thread whenever it reports its stats.
  virtual void metrics(std::vector<metric>& out) const;
  /// Moves the histograms made since the last call into `out` (a trainer's
  /// weights and gradients); called whenever the replica reports its
  /// stats. Default: none.
  virtual void take_histograms(std::vector<histogram_summary>& out);
  /// Moves the step-stamped values made since the last call into `out` (an
  /// evaluator's results, each at the step it evaluated); called whenever
  /// the replica reports its stats. TensorBoard writes each at its step and
  /// leaves the metric of the same name out of its periodic writes.
  /// Default: none.
  virtual void take_scalars(std::vector<scalar_event>& out);
};

struct stage_setup {
  stage_info info;
  std::shared_ptr<stage_logic> logic;
  /// Receives stats, done and stream_error messages.
  caf::actor coordinator;
  std::chrono::milliseconds metrics_interval{500};
  /// Give the replica its own thread (caf::detached).
  bool blocking = false;
  /// Process items from several inputs in sequence-number order, so that
  /// results do not depend on replica counts or timing. Only for a stage
  /// that receives the whole sequence (one replica).
  bool deterministic = false;
};

/// Spawns one stage replica. It waits for its (wire_atom, wiring) message,
/// then runs the stream protocol of runtime/protocol/stream.hpp until its stream ends,
/// it fails, or it is killed. For job::start and node spawners: the wiring
/// messages are internal (runtime/protocol/stream.hpp is not installed), so an
/// application runs stages through job::start. `setup.logic` must not be
/// null; does not throw.
caf::actor spawn_stage(caf::actor_system& sys, stage_setup setup);

} // namespace af
