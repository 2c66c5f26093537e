// Internal to ps_client (not installed): the client's state and the steps
// its calls are made of, shared by
//   ps_client.cpp           construction, join/pause/leave, pull, wait
//   ps_client_push.cpp      push: gradients cut into slices and parts
//   ps_client_recovery.cpp  a shard that is lost, frozen or replaced
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/system_messages.hpp>

#include "actorflow/gpu/params.hpp"
#include "actorflow/runtime/core/wire_dtype.hpp"
#include "actorflow/runtime/net/data_plane.hpp"
#include "actorflow/runtime/protocol/detail/coordinator.hpp"
#include "actorflow/runtime/protocol/ps.hpp"
#include "actorflow/runtime/ps/ps_client.hpp"
#include "actorflow/runtime/stage/replica_label.hpp"

namespace af {

struct ps_client::impl {
  // Requests to shards time out after this and are sent again (see await).
  static constexpr std::chrono::seconds patience{2};
  // The requests await() waits for carry no CAF timeout: await() keeps the
  // time itself. In CAF 0.17 a request's timeout fires even after the
  // answer came, and a blocking actor never takes that stale timeout
  // message out of its mailbox: at thousands of requests a second, the
  // mailbox grew by as many messages and every receive scanned them all (a
  // job's steps per second fell by 100x within a minute).
  static inline const caf::duration awaited{caf::infinite};
  // How long a shard that keeps a request waiting may take to answer stats
  // requests before it counts as lost (it answers between two updates).
  static constexpr std::chrono::seconds probe_patience{10};
  // How often a client waiting for a shard's answer looks for the
  // coordinator's word that the shard is lost (ps_gone_atom).
  static constexpr std::chrono::milliseconds notice_slice{200};
  // How long the coordinator may take to restore a lost shard elsewhere
  // (connect to a node, spawn, load the checkpoint's slice).
  static constexpr std::chrono::seconds locate_patience{120};
  // One CAF message of many MiB crosses processes slowly
  // (docs/benchmarks.md, bench/ps_throughput): dense values travel in
  // parts of about this size, at most this many parts of a pull at once.
  static constexpr size_t default_part_bytes = size_t{4} << 20;
  static constexpr size_t default_pull_window = 8;

  caf::actor_system& sys;
  std::vector<caf::actor> shards;
  std::vector<gpu::param_spec> params; // ps_slice::var numbering
  uint32_t worker;
  coordinator_actor coordinator; // asked for a lost shard's replacement
  caf::scoped_actor self;
  uint64_t clock = 0; // the last step pushed
  bool coordinator_down = false;
  std::vector<uint64_t> read_version; // per shard
  int sparse = -1;                    // index of the sparse param
  std::vector<std::vector<float>> residual;
  std::vector<float> host;
  std::unordered_map<int64_t, int32_t> local;
  // Parts (ps.hpp): their size, the pull window, and per shard the dense
  // slices laid end to end: where variable i starts on that line.
  size_t part_bytes = default_part_bytes;
  size_t window = default_pull_window;
  dtype wire = dtype::f32; // of pushed gradient values (set_wire)
  std::vector<std::vector<uint64_t>> line_base; // [shard][var]
  std::vector<uint64_t> line_size;              // [shard] elements
  // The outstanding pull (pull_async): its requests (one per shard, or one
  // per part) in the order they go out; the first `pending.size()` are out.
  using pull_handle = decltype(std::declval<caf::scoped_actor&>()->request(
    ps_shard_actor{}, awaited, ps_pull_atom::value, ps_pull{}));
  std::vector<pull_handle> pending;
  std::vector<ps_pull> pending_req;    // all of them, kept to ask again
  std::vector<uint32_t> pending_shard; // the shard of each
  bool pulling = false;
  std::vector<int64_t> pending_rows;
  std::chrono::steady_clock::time_point pull_begin;
  // The outstanding push: its messages (one per shard, or one per part).
  using push_handle = decltype(std::declval<caf::scoped_actor&>()->request(
    ps_shard_actor{}, awaited, ps_push_atom::value, ps_push{}));
  std::vector<push_handle> pushes;
  std::vector<ps_push> pushes_req;    // kept to send again
  std::vector<uint32_t> pushes_shard; // the shard of each
  // The outstanding steps (push_then_pull): one request per shard with a
  // push and the pull after it; the pull is the outstanding one (pending_req
  // and pending_shard), its answers come with the push's acknowledgements.
  using step_handle = decltype(std::declval<caf::scoped_actor&>()->request(
    ps_shard_actor{}, awaited, ps_step_atom::value, ps_push{}, ps_pull{}));
  std::vector<step_handle> steps;
  std::vector<ps_push> steps_push; // [shard], kept to send again
  bool stepping = false;
  // Acknowledgements that came with step answers, for the next
  // collect_acks: per shard the largest staleness.
  std::vector<uint64_t> acked;
  bool any_acked = false;
  std::vector<bool> down;             // per shard, from its monitor
  std::vector<bool> gone;             // per shard, the coordinator says
  bool bounced = false; // a request came back unanswered (receiver down)
  uint64_t network_bytes = 0; // slices to and from shards on other nodes

  impl(caf::actor_system& s, std::vector<caf::actor> sh,
       std::vector<gpu::param_spec> ps, uint32_t w, caf::actor c);

  bool remote(uint32_t s) const { return shards[s].node() != self->node(); }
  // Shard s to send to: the handles come as services (caf::actor), and the
  // typed one checks each request against runtime/protocol/ps.hpp's table. A shard
  // on another node is reached through the data plane when it can be
  // (runtime/net/data_plane.hpp): its stand-in there, else CAF's proxy.
  ps_shard_actor shard(size_t s) const {
    return caf::actor_cast<ps_shard_actor>(data_plane::route(sys, shards[s]));
  }
  static uint64_t bytes_of(const std::vector<ps_slice>& slices) {
    uint64_t n = 0;
    for (auto& sl : slices)
      n += sl.index.byte_size() + sl.values.byte_size();
    return n;
  }

  // Parts of the dense values of shard s in a pull or push.
  uint32_t parts_of(uint32_t s) const {
    if (part_bytes == 0)
      return 1;
    auto bytes = line_size[s] * sizeof(float);
    auto n = (bytes + part_bytes / 2) / part_bytes;
    return static_cast<uint32_t>(
      std::clamp<uint64_t>(n, 1, std::numeric_limits<uint32_t>::max()));
  }

  std::string name_of(size_t s) const {
    return replica_label(std::string{ps_service}, static_cast<uint32_t>(s));
  }

  [[noreturn]] void fail(size_t shard, const caf::error& err) {
    throw std::runtime_error("parameter server " + name_of(shard) + ": "
                             + sys.render(err));
  }

  // Sends `ask` to every shard in turn and waits for each answer.
  template <class Atom, class Ok>
  void ask_each(Atom atom, Ok ok) {
    for (size_t s = 0; s < shards.size(); ++s) {
      auto ask = [&] {
        return self->request(shard(s), awaited, atom, worker);
      };
      auto h = ask();
      await(s, h, ask, [&](uint64_t version) { ok(s, version); });
    }
  }

  // --- pull (ps_client.cpp) --------------------------------------------

  // Sends the planned pull's first requests (as many as the window takes).
  void start_pull();
  void send_pull(size_t i) {
    pending.push_back(self->request(shard(pending_shard[i]), awaited,
                                    ps_pull_atom::value, pending_req[i]));
  }
  // The requests of a pull as worker clock `clock`, in the order they go
  // out, and the shard of each (pending_req, pending_shard).
  void plan_pull(uint64_t clock, const std::vector<int64_t>& rows);
  // Waits for the outstanding pull's answers (pull requests) and takes
  // them into `m`.
  void await_pull(gpu::param_store& m, std::vector<bool>& seen);
  // Takes one answer of shard s into `m`; `seen`: the shards answered.
  void take_params(gpu::param_store& m, uint32_t s, ps_params& p,
                   std::vector<bool>& seen);

  // --- push (ps_client_push.cpp) ---------------------------------------

  // One push as it is built: per shard the message's header and the slices
  // that go with part 0 (sparse, top-k, and all dense ones when the shard's
  // values go in one part), and the dense pieces of each part.
  struct push_plan {
    std::vector<ps_push> pushes;                            // [shard]
    std::vector<uint32_t> parts;                            // [shard]
    std::vector<std::vector<std::vector<ps_slice>>> pieces; // [shard][part]
  };
  push_plan plan_push(uint64_t step, uint64_t samples,
                      double topk_fraction) const;
  // The first half of push() and push_then_pull(): the messages of a push
  // of the gradients in `m` and the shard of each, built, and the previous
  // push's acknowledgements collected (in the result, which names a
  // variable with NaN or Inf).
  push_result start_push(gpu::param_store& m, uint64_t step, uint64_t samples,
                         const std::vector<int64_t>& rows,
                         double topk_fraction, std::vector<ps_push>& messages,
                         std::vector<uint32_t>& to);
  // The name of the first variable whose gradient holds NaN or Inf, or "".
  std::string first_nonfinite(gpu::param_store& m,
                              const std::vector<int64_t>& rows) const;
  // Every variable's gradient into `plan`, until one holds NaN or Inf
  // (its name goes to `nonfinite`).
  void slice_gradients(gpu::param_store& m, const std::vector<int64_t>& rows,
                       double topk_fraction, push_plan& plan,
                       std::string& nonfinite);
  tensor values_for(uint32_t s, uint64_t e) const;
  void slice_dense(gpu::param_store& m, size_t var, push_plan& plan,
                   std::string& nonfinite) const;
  void slice_sparse(const std::vector<float>& g, size_t var,
                    const std::vector<int64_t>& rows, push_plan& plan) const;
  void slice_topk(std::vector<float>& g, size_t var, double topk_fraction,
                  push_plan& plan);
  // The messages of a planned push and the shard of each; `clock_only`:
  // one empty message per shard that advances its clock.
  static void messages_of(push_plan& plan, bool clock_only,
                          std::vector<ps_push>& messages,
                          std::vector<uint32_t>& to);
  // Narrows the gradients to the wire dtype and counts the bytes to other
  // nodes.
  void prepare(std::vector<ps_push>& messages, const std::vector<uint32_t>& to);
  void send_push(std::vector<ps_push> messages, std::vector<uint32_t> to);
  // One push message per shard, each with the planned pull of that shard
  // (pending_req[s]): ps_step requests.
  void send_steps(std::vector<ps_push> messages);
  auto send_step(uint32_t s, const ps_push& push, const ps_pull& pull) {
    return self->request(shard(s), awaited, ps_step_atom::value, push, pull);
  }
  void note_ack(uint32_t s, const ps_push_ack& ack) {
    acked.resize(shards.size(), 0);
    acked[s] = std::max(acked[s], ack.staleness);
    any_acked = true;
  }
  // Waits for the outstanding steps' answers: the acknowledgements are
  // noted, the parameters taken into `m`, or dropped when `m` is null.
  void await_steps(gpu::param_store* m, std::vector<bool>& seen);
  void collect_acks(push_result& result);

  // --- recovery (ps_client_recovery.cpp) -------------------------------

  // Waits for the answer to `h` from shard s. A request that times out is
  // sent again (resend() makes a new one), after checking that the shard is
  // still there: pulls and waits are harmless to repeat, and a repeated
  // push is recognised by its step and applied once. So a shard that is
  // lost or frozen (the middleman's heartbeat closes its connection) fails
  // the call within about `patience`, instead of never.
  template <class Handle, class Resend, class Ok>
  void await(size_t s, Handle& h, Resend resend, Ok ok) {
    while (!answered(s, h, ok)) {
      check_down(s);
      h = resend();
    }
  }

  // Up to `patience` for the answer to `h` (taken by `ok`); false when the
  // request is to be sent again. In slices, to hear at once when the
  // coordinator says the shard is lost: its answer will not come (and CAF
  // 0.17 gives the request no error for a lost node until it times out).
  template <class Handle, class Ok>
  bool answered(size_t s, Handle& h, Ok& ok) {
    bool again = false;
    auto deadline = std::chrono::steady_clock::now() + patience;
    for (;;) {
      bool tick = false;
      caf::blocking_actor::accept_one_cond rc;
      self->varargs_receive(
        rc, h.id(), ok,
        [&](caf::error& err) {
          if (err == caf::sec::request_receiver_down)
            bounced = true;
          if (err == caf::sec::request_timeout
              || err == caf::sec::request_receiver_down)
            again = true;
          else
            fail(s, err);
        },
        caf::after(notice_slice) >> [&] { tick = true; });
      if (!tick)
        return !again;
      if (given_up(s, deadline))
        return false; // its late answer, if any, is left unread
    }
  }

  // Between two slices of answered(): true once shard s is down, the
  // coordinator says it is lost, or `deadline` passed.
  bool given_up(size_t s, std::chrono::steady_clock::time_point deadline);
  // Takes the down messages of monitored shards; true if shard s is gone.
  bool take_downs(size_t s);
  // After a request to shard s timed out or bounced: returns once shard s
  // answers (the same shard, or its replacement), or throws.
  void check_down(size_t s);
  // Stats requests to shard s until it answers, is replaced, or
  // `probe_patience` passed.
  void probe(size_t s);
  // True if shard s answered a stats request within `patience`; else
  // `failure` says why not.
  bool answers_stats(size_t s, caf::error& failure);
  // Asks the coordinator where shard s is: true once it was replaced (and
  // this worker registered with the new one), false if the coordinator
  // still has the same shard.
  bool locate(size_t s, std::chrono::seconds timeout);
  // The coordinator's answer to where shard s is; nullopt while it is busy
  // restoring the shard past `timeout`.
  std::optional<caf::actor> ask_coordinator(size_t s,
                                            std::chrono::seconds timeout);
  // Shard s is `fresh` from now on: monitored, and this worker registered
  // there with its clock.
  void rejoin(size_t s, caf::actor fresh);
  // Shard s is lost (`why`): fails the call, or replaces the shard.
  void replace(size_t s, const std::string& why);
};

} // namespace af
