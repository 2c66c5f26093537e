// ps_shard: one parameter-server shard. It owns its part of every variable
// (runtime/protocol/ps.hpp: a contiguous slice of each dense variable, the rows of
// each embedding table that hash to it), the optimizer state of that part
// (gpu/optimizer.hpp) and a version counter, and answers every message
// that runtime/protocol/ps.hpp's table sends to a shard: register (with or without
// a clock), pull, push, pause, done, wait, stats, snapshot, restore and
// replica_lost (3 and 4 arguments). It sends ps_lost_atom to its restorer.
//
// An invalid pull or push (unknown variable, wrong dtype or size, a row out
// of range or owned by another shard) is answered with a caf::error
// (sec::invalid_argument) whose context names the shard, the variable and
// what is wrong; it changes nothing and the shard goes on serving.
//
// Semantics decided here, beyond ps.hpp:
//   - Workers register explicitly, or implicitly with their first pull or
//     push; either way the shard monitors the sender, and a sender that
//     goes down drops its workers from the clocks (workers_lost).
//   - A worker that left (done or down) is out of the clocks; its pushes
//     are refused, and registering again brings it back with its clock,
//     at least the slowest live worker's (a trainer respawned for a lost
//     one). The coordinator's replica_lost for a worker the shard saw go
//     down itself is old news and changes nothing: it must not drop the
//     respawned trainer that may have registered since.
//   - While fewer than expected_workers workers have registered (or left),
//     each missing one counts as a live worker at clock 0: a worker that
//     starts late cannot be overtaken by more than tau clocks, and at
//     tau = 0 no clock completes without it.
//   - Steps may skip ahead (a worker's clock is its last step); a clock
//     counts as pushed by a worker whose clock is at or past it.
//   - A push's staleness is version - read_version at its arrival (0 when
//     read_version is ahead, e.g. after a restore); it is recorded for
//     pushes with samples > 0. At tau = 0 a clock's update uses the largest
//     staleness of its pushes for lr scaling.
//   - The ack is sent at once; at tau = 0 applied = true means accepted,
//     and the gradients enter the parameters when the clock completes.
//     ps_shard_stats::pushes (and ps_wait's steps) count pushes whose
//     gradients are in the parameters, skipped pushes (samples = 0)
//     included.
//   - Every update with samples > 0 increments the version, even one with
//     no gradient for this shard: the shards' versions stay in step.
//   - Sparse rows are materialised (initial_value(p, seed, row * dim + j))
//     on first pull or push, and then stay.
//   - A restore replaces everything in the snapshot; pulls and waits that
//     wait stay and are answered by the restored state. Restored workers
//     are not monitored until they speak again.
//   - Pushes in parts (ps.hpp): the parts in are kept per worker and step
//     (not in snapshots; a restore keeps them, and the whole push is then
//     checked against the restored clocks). A part is checked when it
//     arrives (an invalid one changes nothing); the whole is checked as a
//     push when the last part is in, and if its dense pieces do not cover
//     the slice it is dropped with an error. A worker that leaves drops
//     its unfinished pushes in parts, and so does a push of a later step
//     when it completes; at most 4 wait per worker. A duplicate counts
//     once per message; a delayed pull in parts once (its part 0).
//   - An exit with an error reason (a link's, or a kill) fails the pulls
//     and waits that wait with sec::request_receiver_down.
//
// Snapshot format (ps_shard_state::snapshot): a state frame of
// runtime/state/state_io.hpp (magic, format version 2, CRC32C) with the tag
// "ps_shard/2", whose values are, in order, through CAF's binary
// serializer (integers big-endian; str and list = varint count, then the
// elements; array = varint count, then the numbers as one raw block in
// host byte order, little-endian on every platform ActorFlow builds for):
//
//   ps_shard_stats (runtime/protocol/ps.hpp's inspect: shard, version, pushes,
//       duplicates, skipped, staleness_sum, staleness_max, delayed_pulls,
//       rows, workers_lost)
//   u32 shards, str optimizer type
//   list of variables (param_specs() order): str name, bool sparse,
//       list of i64 shape,
//       array of i64 row ids (sparse: the rows materialised, in the order
//                             of the values; dense: empty),
//       array of f32 values  (dense: this shard's slice; sparse: rows x dim),
//       array of u64 optimizer step counts (dense: 1; sparse: one per row),
//       array of f32 optimizer slot 1, array of f32 slot 2
//       (gpu::optimizer_state::arrays)
//   list of workers by ascending id: u32 id, u64 last step,
//       u8 live (0 left, 1 live, 2 paused at a checkpoint cut)
//   list of clocks (tau = 0: pushes accepted for clocks not yet complete)
//       by ascending step: u64 step, u64 samples, u64 pushes,
//       u64 staleness, then a list of gradients by ascending var (those
//       with any): u32 var, bool has_dense, array of f32 summed dense
//       gradient (has_dense: the slice; else empty), list of (u64 element
//       of the slice, f32 gradient) (top-k sums), list of (i64 row id,
//       array of dim f32 gradient) (sparse sums)
//
// ActorFlow 0.1 wrote "AFPSSNAP" snapshots of its own encoding (version
// 1); restore() refuses them naming that version.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "actorflow/gpu/model.hpp"
#include "actorflow/gpu/optimizer.hpp"
#include "actorflow/runtime/protocol/ps.hpp"

namespace af {

struct ps_shard_config {
  /// This shard's index, < shards.
  uint32_t shard = 0;
  uint32_t shards = 1;
  /// Every variable of the model, in param_specs() order (the ps_slice::var
  /// numbering). Sparse ones must have shape [rows, dim].
  std::vector<gpu::param_spec> params;
  gpu::optimizer_config optimizer;
  /// The staleness bound tau in clocks; nullopt: unbounded (pulls never
  /// wait), 0: synchronous (a clock's pushes are applied as one update).
  std::optional<uint64_t> staleness;
  /// Divide the learning rate of an update by its staleness when > 1.
  bool scale_lr_by_staleness = false;
  /// The dtype of the values of pull answers (f32, bf16 or f16: rounded
  /// from the f32 master values). Pushes are taken in any of the three.
  dtype wire = dtype::f32;
  /// Workers the job runs (0: unknown). Used for the clocks before every
  /// worker has registered and for ps_progress::finished.
  uint32_t expected_workers = 0;
  /// The job seed: initial values come from it (gpu::initial_value).
  uint64_t seed = 0;
  /// For logs and error messages, e.g. "ps[0]".
  std::string name;
  /// The stage whose replicas are the workers (replica r = worker r): a
  /// (replica_lost_atom, stage, r) from the coordinator drops worker r
  /// like its own down message would.
  std::string worker_stage;
};

/// "" when `cfg` can make a shard, otherwise what is wrong (shard index,
/// optimizer, a sparse variable's shape).
std::string check(const ps_shard_config& cfg);

/// Spawns a shard as a detached actor (its updates are long CPU loops), a
/// ps_shard_actor (runtime/protocol/ps.hpp) returned as the caf::actor a service is
/// (registry.hpp). Throws std::invalid_argument with check()'s message for
/// a bad config.
caf::actor spawn_ps_shard(caf::actor_system& sys, ps_shard_config cfg);

/// One shard's part of the variables, as its snapshot holds them.
struct ps_snapshot_values {
  uint32_t shard = 0, shards = 1;
  struct variable {
    std::string name;
    bool sparse = false;
    std::vector<int64_t> shape;
    std::vector<int64_t> ids; // sparse: the rows held, in values' order
    std::vector<float> values; // dense: this shard's slice; sparse: rows
  };
  std::vector<variable> vars; // in param_specs() order
};

/// Reads the values out of a shard's snapshot (`actorflow export`).
/// Throws std::invalid_argument as a restore would refuse the bytes.
ps_snapshot_values read_ps_snapshot(const std::string& bytes);

/// The shard's state machine, without CAF: what the actor does with each
/// message, and which waiting requests each event releases. The actor
/// only holds the response promises of requests that wait, under tickets
/// of its choosing. Not thread-safe.
class ps_shard_state {
public:
  /// Initialises the dense slices. Throws std::invalid_argument with
  /// check()'s message for a bad config.
  explicit ps_shard_state(ps_shard_config cfg);
  ~ps_shard_state();
  ps_shard_state(const ps_shard_state&) = delete;
  ps_shard_state& operator=(const ps_shard_state&) = delete;

  const ps_shard_config& config() const noexcept;

  /// Counts `worker` in the clocks (again, if it had left or was paused
  /// at a checkpoint cut; with the clock it had). A worker that had left,
  /// or a new one once every expected worker registered, starts at least
  /// at the slowest live worker's clock: a trainer respawned for a lost
  /// one, or added, holds nobody back. Returns the version. Registering a live worker changes nothing but `clock`: the
  /// worker's clock becomes at least that (a worker joining a shard
  /// restored from a checkpoint while it trained on).
  /// `catch_up` false (a worker joining a restored shard with its own
  /// clock): no jump to the slowest live clock.
  uint64_t register_worker(uint32_t worker, uint64_t clock = 0,
                           bool catch_up = true);

  /// `worker` is at a checkpoint cut: out of the clocks until it registers
  /// again, with the clock it had (at tau = 0 a clock it was holding up
  /// completes), but not done
  /// (ps_progress::finished stays false). Unknown, left or paused
  /// workers are left alone. Returns the version.
  uint64_t pause(uint32_t worker);

  /// `worker` said done (lost = false) or went down (lost = true): out of
  /// the clocks; at tau = 0 a clock it was holding up completes. A worker
  /// that already left is left alone (a down after done is not a loss).
  /// Returns the version.
  uint64_t leave(uint32_t worker, bool lost);

  /// Whether `worker` ever registered (it may have left since).
  bool knows(uint32_t worker) const;
  /// Whether `worker` is registered and has not left.
  bool is_live(uint32_t worker) const;
  /// `worker`'s clock (its last step pushed); 0 if unknown.
  uint64_t clock_of(uint32_t worker) const;

  /// A pull. Returns an error message, or "" with `answer` set when the
  /// staleness bound allows it now, or "" with `answer` empty when it
  /// waits: take_released() returns it under `ticket` later.
  std::string pull(uint64_t ticket, const ps_pull& req,
                   std::optional<ps_params>& answer);

  /// A push. Returns an error message (nothing changed), or "" with `ack`
  /// filled.
  std::string push(const ps_push& req, ps_push_ack& ack);

  /// ps_wait: the progress now if `steps` pushes are in or every worker is
  /// done; otherwise nullopt and take_released() returns it under `ticket`
  /// later.
  std::optional<ps_progress> wait(uint64_t ticket, uint64_t steps);

  /// Waiting requests that can now be answered, removed from the state.
  /// Call after every event.
  struct released {
    std::vector<std::pair<uint64_t, ps_params>> pulls;
    std::vector<std::pair<uint64_t, ps_progress>> waits;
  };
  released take_released();

  /// Tickets still waiting (pulls and waits).
  size_t waiting() const noexcept;

  uint64_t version() const noexcept;
  ps_progress progress() const;
  ps_shard_stats stats() const;

  /// Everything that must survive a restart (format above): the values,
  /// the optimizer state, the version, every worker's last step and live
  /// flag, the pushes of incomplete clocks and the stats. Not the pulls
  /// and waits that wait.
  std::string snapshot() const;

  /// Replaces what snapshot() holds with `bytes`. Throws
  /// std::invalid_argument naming the shard and what is wrong (not a
  /// snapshot, a damaged or truncated one, another shard index or shard
  /// count, other variable names, shapes or sparse flags, another
  /// optimizer type, inconsistent sizes), and then nothing changed. Call
  /// take_released() after it.
  void restore(const std::string& bytes);

  /// The values this shard holds of variable `var`: a dense slice, or the
  /// rows `rows` of a sparse variable (materialised if needed; they must
  /// be valid and owned). For tests and checkpoints.
  std::vector<float> values(uint32_t var,
                            const std::vector<int64_t>& rows = {});

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace af
