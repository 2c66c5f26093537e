// The parameter-server protocol: every message between the PS clients
// (af::ps_client: trainer replica r is worker r, the evaluator pulls as
// ps_observer), the shards (actors/ps_shard/ps_shard.hpp) and the job's
// coordinator, and how variables are partitioned over the shards.
// docs/training.md explains the consistency model, docs/multi-host.md the
// restoring of a lost shard; this header is their vocabulary.
//
//   client -> shard        (ps_register_atom, worker)        -> version
//       joins the clocks (again after done or pause); sender monitored
//   client -> shard        (ps_register_atom, worker, clock) -> version
//       the same into a shard restored mid-job: clock at least `clock`
//   client -> shard        (ps_clock_atom, worker)           -> clock
//       the worker's clock here, after it registered: a trainer respawned
//       for a lost one goes on from there (its steps continue the lost
//       worker's clock)
//   client -> shard        (ps_pull_atom, ps_pull)           -> ps_params
//       each step; waits for the staleness bound
//   client -> shard        (ps_push_atom, ps_push)           -> ps_push_ack
//       each step; acknowledged at once
//   client -> shard        (ps_step_atom, ps_push, ps_pull)
//                                          -> (ps_push_ack, ps_params)
//       a push and the next step's pull in one request: the push is
//       handled, then the pull, exactly as the two messages in that order
//       (an invalid push: its error, and no pull); one message each way
//       instead of two (ps_client::push_then_pull)
//   client -> shard        (ps_pause_atom, worker)           -> version
//       at a checkpoint cut: out of the clocks, not done, until it registers
//   client -> shard        (ps_done_atom, worker)            -> version
//       its input ended: out of the clocks
//   client -> shard        (ps_wait_atom, steps)             -> ps_progress
//       the evaluator, to ps[0]: waits for `steps` pushes or every worker done
//   client -> shard        (ps_stats_atom)                   -> ps_shard_stats
//       is a shard that is slow to answer alive? (and tests, benchmarks)
//   coordinator -> shard   (ps_snapshot_atom)                -> std::string
//       a checkpoint round (format: actors/ps_shard/ps_shard.hpp)
//   coordinator -> shard   (ps_restore_atom, std::string)    -> version
//       --resume (job::start, before any stage); a lost shard's replacement
//   coordinator -> shard   (replica_lost_atom, stage, replica)
//       to every service: a replica the job goes on without
//   coordinator -> shard   (replica_lost_atom, stage, replica, ended)
//       to a replacement, before any client is given it: each replica that
//       has ended (ended = true) or is lost (false)
//     (these four are the service protocol, runtime/protocol/service.hpp, that
//     every service answers)
//   shard -> coordinator   (ps_lost_atom, label, worker, pushes)
//       to the last restorer: a worker joined `pushes` clocks ahead
//   client -> coordinator  (ps_watch_atom)
//       at the start: send me ps_gone_atom
//   coordinator -> client  (ps_gone_atom, label)
//       shard `label` ("ps[1]") is lost: stop waiting for its answers
//   client -> coordinator  (ps_locate_atom, label)           -> caf::actor
//       shard `label` does not answer: the current one (waits while it is
//       restored); the client registers there with its clock and sends its
//       outstanding requests again
//
// version, steps, clock, pushes: uint64_t; worker, replica: uint32_t;
// label, stage: std::string; ended: bool. ps_shard_actor (below) is the
// shard's rows as a type: a message it does not list does not compile.
//
// Invariants (checked by tests/actors/ps_shard/ps_shard_test.cpp and
// tests/runtime/ps/ps_client_test.cpp):
//   - a worker's clock is its last step pushed; a pull at clock c is
//     answered when c - min(clock of every live worker) <= tau
//     (Training.ps.staleness); tau unset, or ps_observer: at once;
//   - at tau = 0 the pushes of a clock enter the parameters as one update,
//     once every live worker has pushed it;
//   - gradients are sums over the push's samples; an update divides by
//     its samples (one push's, or its clock's at tau = 0);
//   - a push with step <= the worker's clock is a retry: applied = false,
//     nothing changes; samples = 0 without gradients moves the clock only;
//   - every update with samples > 0 increments the version of every shard:
//     the shards' versions stay in step;
//   - a pull sent after a push by the same client sees that push (CAF
//     keeps per-sender order);
//   - a worker that goes down, or whose replica the coordinator reports
//     lost (replica_lost_atom, for the shard's worker stage), leaves the
//     clocks as lost; `ended` = true leaves it as done;
//   - a worker that had left registers again (a trainer respawned for a
//     lost one) at the larger of its own clock and the slowest live
//     worker's: it holds nobody back beyond tau, and no push of it is
//     taken for a retry of the lost one's;
//   - parts = n > 1: n messages, part = 0 .. n-1. Pull part p is answered
//     on its own with the elements ps_dense_slice(total, p, n) of the
//     shard's dense slices laid end to end (and the sparse rows it asks
//     for). The parts of a push share its worker, step, read_version and
//     samples, and their dense pieces cover each slice exactly once; the
//     shard handles them as one push when the last is in, and acknowledges
//     that part with the push's ack, the others with applied = true and
//     staleness 0;
//   - a snapshot holds no request that waits; an invalid request (pull,
//     push, or restore of another shard, model or optimizer) is answered
//     with sec::invalid_argument naming the shard and changes nothing.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actorflow/runtime/core/tensor.hpp"
#include "actorflow/runtime/protocol/service.hpp"

namespace af {

using ps_register_atom = caf::atom_constant<caf::atom("ps_reg")>;
using ps_clock_atom = caf::atom_constant<caf::atom("ps_clock")>;
using ps_pull_atom = caf::atom_constant<caf::atom("ps_pull")>;
using ps_push_atom = caf::atom_constant<caf::atom("ps_push")>;
using ps_step_atom = caf::atom_constant<caf::atom("ps_step")>;
using ps_done_atom = caf::atom_constant<caf::atom("ps_done")>;
using ps_pause_atom = caf::atom_constant<caf::atom("ps_pause")>;
using ps_wait_atom = caf::atom_constant<caf::atom("ps_wait")>;
using ps_stats_atom = caf::atom_constant<caf::atom("ps_stats")>;
using ps_snapshot_atom = service_snapshot_atom;
using ps_restore_atom = service_restore_atom;
/// (ps_locate_atom, label) does not send the lost shard's handle along:
/// CAF 0.17 holds a message that names an actor of a node it lost until it
/// gave up routing to that node.
using ps_locate_atom = caf::atom_constant<caf::atom("ps_where")>;
using ps_lost_atom = caf::atom_constant<caf::atom("ps_lost")>;
using ps_watch_atom = caf::atom_constant<caf::atom("ps_watch")>;
using ps_gone_atom = caf::atom_constant<caf::atom("ps_gone")>;

/// The name under which the job's parameter-server shards are a service
/// (job_context::service); shard k is "ps[k]".
inline constexpr const char* ps_service = "ps";

/// The worker id of pulls that never wait and are not counted in clocks.
constexpr uint32_t ps_observer = std::numeric_limits<uint32_t>::max();

/// Part of one variable.
///   dense values:      index empty, values f32 [n] = elements
///                      [offset, offset + n) of the flattened variable;
///   sparse rows:       index i64 [r] row ids, values f32 [r, dim];
///   dense, sparsified: index i64 [k] element indices (of the flattened
///                      variable), values f32 [k] (top-k pushes).
/// In a pull request only `var` and (sparse) `index` are set.
struct ps_slice {
  uint32_t var = 0; // index in param_specs() order
  uint64_t offset = 0;
  tensor index;
  tensor values;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ps_slice& x) {
  return f(caf::meta::type_name("af::ps_slice"), x.var, x.offset, x.index,
           x.values);
}

struct ps_pull {
  uint32_t worker = 0;
  uint64_t clock = 0;
  /// Sparse variables: the rows wanted (this shard's rows only). Dense
  /// variables need no entry: the shard's slices of all of them come back.
  std::vector<ps_slice> rows;
  /// This request is part `part` of a pull in `parts` parts (see above).
  uint32_t part = 0;
  uint32_t parts = 1;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ps_pull& x) {
  return f(caf::meta::type_name("af::ps_pull"), x.worker, x.clock, x.rows,
           x.part, x.parts);
}

struct ps_params {
  uint32_t shard = 0;
  /// Updates applied so far; a push says which version it read.
  uint64_t version = 0;
  std::vector<ps_slice> slices;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ps_params& x) {
  return f(caf::meta::type_name("af::ps_params"), x.shard, x.version,
           x.slices);
}

struct ps_push {
  uint32_t worker = 0;
  uint64_t step = 0;         // 1-based
  uint64_t read_version = 0; // the version the gradients were computed on
  uint64_t samples = 0;
  std::vector<ps_slice> grads;
  /// This message is part `part` of a push in `parts` parts (see above).
  uint32_t part = 0;
  uint32_t parts = 1;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ps_push& x) {
  return f(caf::meta::type_name("af::ps_push"), x.worker, x.step,
           x.read_version, x.samples, x.grads, x.part, x.parts);
}

struct ps_push_ack {
  bool applied = false;   // false: a duplicate, ignored
  uint64_t staleness = 0; // updates applied between read and this push
  uint64_t version = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ps_push_ack& x) {
  return f(caf::meta::type_name("af::ps_push_ack"), x.applied, x.staleness,
           x.version);
}

struct ps_progress {
  uint64_t steps = 0;    // pushes applied (not duplicates)
  bool finished = false; // every expected worker is done or gone
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ps_progress& x) {
  return f(caf::meta::type_name("af::ps_progress"), x.steps, x.finished);
}

struct ps_shard_stats {
  uint32_t shard = 0;
  uint64_t version = 0;
  uint64_t pushes = 0;      // applied
  uint64_t duplicates = 0;  // retries ignored
  uint64_t skipped = 0;     // pushes with samples = 0
  uint64_t staleness_sum = 0;
  uint64_t staleness_max = 0;
  uint64_t delayed_pulls = 0; // pulls that waited for the bound
  uint64_t rows = 0;          // sparse rows materialised
  uint64_t workers_lost = 0;  // went down without done
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ps_shard_stats& x) {
  return f(caf::meta::type_name("af::ps_shard_stats"), x.shard, x.version,
           x.pushes, x.duplicates, x.skipped, x.staleness_sum,
           x.staleness_max, x.delayed_pulls, x.rows, x.workers_lost);
}

/// What a PS client sends a shard: the client -> shard rows above.
using ps_shard_requests = caf::typed_actor<
  caf::replies_to<ps_register_atom, uint32_t>::with<uint64_t>,
  caf::replies_to<ps_register_atom, uint32_t, uint64_t>::with<uint64_t>,
  caf::replies_to<ps_clock_atom, uint32_t>::with<uint64_t>,
  caf::replies_to<ps_pull_atom, ps_pull>::with<ps_params>,
  caf::replies_to<ps_push_atom, ps_push>::with<ps_push_ack>,
  caf::replies_to<ps_step_atom, ps_push, ps_pull>::with<ps_push_ack, ps_params>,
  caf::replies_to<ps_pause_atom, uint32_t>::with<uint64_t>,
  caf::replies_to<ps_done_atom, uint32_t>::with<uint64_t>,
  caf::replies_to<ps_wait_atom, uint64_t>::with<ps_progress>,
  caf::replies_to<ps_stats_atom>::with<ps_shard_stats>>;
/// A shard's interface: those and the service protocol (the coordinator ->
/// shard rows). The down and exit messages CAF sends it (the workers it
/// monitors, a link or a kill) are no part of a typed interface in CAF 0.17:
/// the shard takes them with set_down_handler and set_exit_handler.
using ps_shard_actor = service_actor::extend_with<ps_shard_requests>;

// --- partitioning ----------------------------------------------------------

/// Elements [lo, hi) of a dense variable.
struct ps_range {
  uint64_t lo = 0;
  uint64_t hi = 0;
};

/// Dense variables are cut into `shards` contiguous slices of nearly equal
/// size (the first `elements % shards` get one more).
ps_range ps_dense_slice(uint64_t elements, uint32_t shard, uint32_t shards);

/// Which shard owns row `row` of an embedding table (a hash of the id, so
/// that consecutive ids spread).
uint32_t ps_row_shard(int64_t row, uint32_t shards);

} // namespace af
