// The worker side of the parameter-server protocol (runtime/protocol/ps.hpp): what a
// trainer or an evaluator calls to register with the shards, pull the
// parameters into a model, push gradients and say done. The shards are
// actors/ps_shard/ps_shard.hpp; ps_dense_slice and ps_row_shard (ps.hpp) are the
// slicer both sides cut variables with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "actorflow/gpu/params.hpp"
#include "actorflow/runtime/protocol/ps.hpp"

namespace af {

/// The worker side of the PS protocol, over a scoped actor: the calls
/// block, so they run on a trainer's or evaluator's own thread.
///
/// A shard that goes down or stops answering fails the call, unless the
/// client knows the job's `coordinator`: then it asks the coordinator for
/// the shard's replacement (ps_locate_atom), registers there with its clock
/// and sends its outstanding requests again; the call fails only when the
/// coordinator cannot restore the shard.
class ps_client {
public:
  /// `params`: every variable of the model, in gpu::param_specs() order
  /// (the ps_slice::var numbering), as the shards have them. Throws
  /// std::invalid_argument when `shards` is empty.
  ps_client(caf::actor_system& sys, std::vector<caf::actor> shards,
            std::vector<gpu::param_spec> params, uint32_t worker,
            caf::actor coordinator = {});
  ~ps_client();

  /// The worker's clocks around join(), the largest any shard has
  /// (ps_clock_atom).
  struct joined {
    /// Before: the last step the shards have of this worker id (a lost
    /// worker's, for a trainer respawned in its place); 0 when new.
    uint64_t own = 0;
    /// After: where its steps go on from (own, or the slowest live
    /// worker's clock when that is larger).
    uint64_t clock = 0;
  };

  /// Announces the worker to every shard (ps_register_atom); after
  /// pause(), brings it back into the clocks.
  joined join();
  /// At a checkpoint cut: collects outstanding acknowledgements, then
  /// pauses the worker at every shard (ps_pause_atom) until join().
  void pause();
  /// Collects outstanding acknowledgements, then says done to every shard.
  void leave();

  /// Pulls the dense variables and `rows` of the sparse one into `m`
  /// (uploading them to its device) as worker clock `clock`; waits as the
  /// staleness bound says. Returns the seconds spent waiting.
  double pull(gpu::param_store& m, uint64_t clock, const std::vector<int64_t>& rows);

  /// pull() in two halves: send the requests now, take the answers into
  /// `m` later (a trainer prefetches the next step's parameters while it
  /// computes). One pull may be outstanding at a time. pull_wait returns
  /// the seconds since pull_async.
  void pull_async(uint64_t clock, const std::vector<int64_t>& rows);
  double pull_wait(gpu::param_store& m);

  /// Pushes the gradients in `m` (sums over `samples`) as step `step`;
  /// `rows` names the sparse variable's local rows. topk_fraction > 0
  /// sends only the largest dense entries and keeps the rest for the next
  /// push. Gradients with NaN or Inf are not pushed: the push advances the
  /// clock only and the offending variable's name is returned. The call
  /// does not wait for the shards: it collects the acknowledgements of the
  /// previous push (their staleness is in the result) and sends this one;
  /// a later pull is answered after it all the same (messages from one
  /// sender arrive in order). flush() collects the last acknowledgements.
  struct push_result {
    std::string nonfinite; // variable name, or empty
    bool acknowledged = false; // staleness below is of the previous push
    uint64_t staleness_max = 0;
    double staleness_mean = 0;
  };
  push_result push(gpu::param_store& m, uint64_t step, uint64_t samples,
                   const std::vector<int64_t>& rows, double topk_fraction);
  /// push(), then pull_async(clock, next_rows), in one request per shard
  /// each way instead of two (ps_step_atom) when every shard's push and
  /// pull are one message each (no parts); otherwise as the two calls.
  /// Either way the pull is outstanding afterwards: pull_wait() takes its
  /// parameters, and the push's acknowledgements that came with them are
  /// in the next push's (or flush's) result. Call pull_wait() before the
  /// next push(), flush(), pause() or leave(): those wait for a combined
  /// request's answers themselves and drop its parameters. A pull that a
  /// staleness bound holds back is asked again, with its push, every few
  /// seconds: use it with unbounded staleness (the trainer does).
  push_result push_then_pull(gpu::param_store& m, uint64_t step, uint64_t samples,
                             const std::vector<int64_t>& rows,
                             double topk_fraction, uint64_t clock,
                             const std::vector<int64_t>& next_rows);
  push_result flush();
  /// Whether a push was sent whose acknowledgements were not yet taken
  /// (by the next push, flush(), or pull_wait() after push_then_pull):
  /// until then the shards may not have applied it.
  bool push_unacknowledged() const noexcept;

  /// Blocks until `steps` pushes were applied or training finished.
  ps_progress wait(uint64_t steps);

  /// Large tensors on the wire (runtime/protocol/ps.hpp, parts): the dense values a
  /// pull takes from, or a push sends to, one shard travel in parts of
  /// about `bytes` (between 0.5 and 1.5 times; default 4 MiB) when they
  /// are larger; all parts of a push go at once, at most `window` parts of
  /// a pull (and at least one per shard) are in flight. bytes = 0: one
  /// message per shard always. Call between pulls and pushes.
  void set_part_bytes(size_t bytes, size_t window = 8);

  /// The dtype of pushed gradient values (Training.ps.wire): f32
  /// (default), bf16 or f16, rounded from the model's f32 gradients (the
  /// NaN/Inf check runs before). Pull answers are taken in any of the
  /// three (the shards' wire setting decides). Throws
  /// std::invalid_argument for another dtype.
  void set_wire(dtype wire);

  /// Bytes of parameters pulled from, and gradients pushed to, shards on
  /// other nodes so far (the tensors' data; CAF's framing not counted).
  uint64_t network_bytes() const noexcept;
  /// The version (updates applied) of shard 0's parameters that the last
  /// pull read: the global step those parameters belong to.
  uint64_t read_version() const noexcept;

private:
  struct impl; // runtime/ps/detail/ps_client_impl.hpp
  std::unique_ptr<impl> impl_;
};

} // namespace af
