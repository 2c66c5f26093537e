// The parameter-server protocol: every message between trainers (workers),
// the evaluator and the parameter-server shards, and how variables are
// partitioned over the shards. docs/training.md explains the consistency
// model; this header is its vocabulary.
//
//   worker -> shard  (ps_register_atom, worker)  -> (version)
//       the shard counts the worker in its clocks and monitors the sender;
//       a worker that goes down is dropped as if it had said done.
//   worker -> shard  (ps_register_atom, worker, clock) -> (version)
//       the same, and the worker's clock becomes at least `clock`: a
//       worker joining a shard restored from a checkpoint while the job
//       runs (its pushes since the checkpoint are lost with the old shard).
//   worker -> shard  (ps_pull_atom, ps_pull)     -> ps_params
//       answered once the staleness bound allows (see below).
//   worker -> shard  (ps_push_atom, ps_push)     -> ps_push_ack
//   worker -> shard  (ps_pause_atom, worker)     -> (version)
//       the worker is at a checkpoint cut: out of the clocks (a clock it
//       holds up completes) until it registers again, but not done.
//   worker -> shard  (ps_done_atom, worker)      -> (version)
//   anyone -> shard  (ps_wait_atom, steps)       -> ps_progress
//       answered once `steps` pushes were applied or every worker is done.
//   anyone -> shard  (ps_stats_atom)             -> ps_shard_stats
//   anyone -> shard  (ps_snapshot_atom)          -> (std::string)
//       the shard's part of the model, its optimizer state, version,
//       workers' last steps and stats, as bytes for a checkpoint
//       (format: actors/ps_shard.hpp); requests that wait are not in it.
//   anyone -> shard  (ps_restore_atom, std::string) -> (version)
//       replaces all of that with a snapshot of a shard of the same index,
//       shard count, variables and optimizer; anything else is refused
//       (sec::invalid_argument) and changes nothing.
//   worker -> coordinator (ps_locate_atom, label) -> (caf::actor)
//       shard `label` ("ps[1]") does not answer: the answer is the shard as
//       the coordinator knows it. That is the same actor while it is not
//       known to be lost; while it is being restored from the last
//       checkpoint on another node (docs/multi-host.md) the answer waits
//       for the new one; it is an error when the job cannot go on without
//       it. A worker given a new shard registers there (with its clock) and
//       sends its outstanding requests again. (The lost actor's handle is
//       not sent along: CAF 0.17 holds a message that names an actor of a
//       node it lost until it gave up routing to that node.)
//   worker -> coordinator (ps_watch_atom)
//   coordinator -> worker (ps_gone_atom, label)
//       a worker asks to be told when a shard is lost; the coordinator
//       then tells it at once (it is connected to every node and has the
//       heartbeat), and the worker gives up waiting for that shard's
//       answers and asks for its replacement (ps_locate_atom) instead of
//       waiting for its requests to time out.
//   shard -> restorer (ps_lost_atom, label, worker, pushes)
//       a worker joined with a clock `pushes` ahead of the one the shard
//       was restored with: those pushes are lost. Sent to whoever sent
//       ps_restore_atom (the coordinator).
//
// Clocks and the staleness bound tau (Training.ps.staleness):
//   - a worker's clock is the number of pushes it made; push `step` s
//     (1-based) completes its clock s;
//   - a pull by a worker at clock c is answered when c - min(clock of every
//     live worker) <= tau; tau = 0 additionally sums the pushes of all live
//     workers for a clock and applies them as one update, so that the
//     answer holds that update (synchronous training); tau unset is
//     unbounded: pulls never wait (asynchronous);
//   - pulls with worker == ps_observer (the evaluator) never wait.
//
// Gradients are SUMS over the push's samples; the shard divides by the
// samples of the update (one push, or a clock's pushes together), so that
// K workers at tau = 0 give the update one worker would on the
// concatenated batch.
//
// A push with step <= the worker's last applied step is a retry: it is
// acknowledged with applied = false and changes nothing. A push with no
// gradients and samples = 0 advances the worker's clock only (a skipped
// step).
//
// Parts (large tensors on the wire). One CAF message of many MiB crosses
// processes slowly; a worker therefore cuts what it sends to, and asks
// from, one shard into parts of a few MiB (actors/model_feed.cpp) and keeps
// several in flight:
//   - a pull with parts = n > 1 is n requests, part = 0 .. n-1: the shard
//     lays its dense slices end to end (variables in order) and answers
//     part p with the elements ps_dense_slice(total, p, n) of that line
//     (sparse rows are answered in whichever part asks for them). Each part
//     is answered on its own, when the staleness bound allows, with the
//     version at that moment;
//   - a push with parts = n > 1 is n messages with the same worker, step,
//     read_version and samples, part = 0 .. n-1, that share the gradients
//     out between them; a dense gradient may be cut into contiguous pieces
//     (offset + elements), which together must cover the shard's slice
//     exactly once. The shard keeps the parts until all n are in and then
//     handles them as ONE push (clocks, tau = 0 sums, staleness, retries:
//     all as above). Every part is acknowledged: the part that completes
//     the push with that push's ack, the others with applied = true and
//     staleness 0 (accepted, waiting for the rest); a part that arrives
//     again before the push is complete changes nothing, and one of a step
//     already applied is acknowledged with applied = false.
// parts = 1 (the default) is one message, exactly as above.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>

#include "runtime/tensor.hpp"

namespace af {

using ps_register_atom = caf::atom_constant<caf::atom("ps_reg")>;
using ps_pull_atom = caf::atom_constant<caf::atom("ps_pull")>;
using ps_push_atom = caf::atom_constant<caf::atom("ps_push")>;
using ps_done_atom = caf::atom_constant<caf::atom("ps_done")>;
using ps_pause_atom = caf::atom_constant<caf::atom("ps_pause")>;
using ps_wait_atom = caf::atom_constant<caf::atom("ps_wait")>;
using ps_stats_atom = caf::atom_constant<caf::atom("ps_stats")>;
using ps_snapshot_atom = caf::atom_constant<caf::atom("ps_snap")>;
using ps_restore_atom = caf::atom_constant<caf::atom("ps_rest")>;
using ps_locate_atom = caf::atom_constant<caf::atom("ps_where")>;
using ps_lost_atom = caf::atom_constant<caf::atom("ps_lost")>;
using ps_watch_atom = caf::atom_constant<caf::atom("ps_watch")>;
using ps_gone_atom = caf::atom_constant<caf::atom("ps_gone")>;

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
