#include "actors/model_feed.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/system_messages.hpp>

#include <spdlog/spdlog.h>

#include "runtime/census.hpp"
#include "runtime/failpoint.hpp"

namespace af {

namespace {

int64_t per_sample(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape)
    n *= d;
  return n;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s;
  for (auto d : shape)
    s += (s.empty() ? "" : "x") + std::to_string(d);
  return s;
}

// Values of an integer tensor as int64, whatever its integer dtype.
int64_t int_at(const tensor& t, int64_t i) {
  switch (t.type()) {
    case dtype::u8:
      return t.data_as<uint8_t>()[i];
    case dtype::i32:
      return t.data_as<int32_t>()[i];
    case dtype::i64:
      return t.data_as<int64_t>()[i];
    default:
      return 0;
  }
}

bool is_int(dtype t) {
  return t == dtype::u8 || t == dtype::i32 || t == dtype::i64;
}

// Each of n samples from [h, w, c] to [c, h, w], in place.
void hwc_to_chw(std::vector<float>& x, int64_t n, int64_t h, int64_t w,
                int64_t c) {
  std::vector<float> tmp(static_cast<size_t>(h * w * c));
  for (int64_t i = 0; i < n; ++i) {
    auto* p = x.data() + i * h * w * c;
    for (int64_t y = 0; y < h; ++y)
      for (int64_t z = 0; z < w; ++z)
        for (int64_t k = 0; k < c; ++k)
          tmp[static_cast<size_t>((k * h + y) * w + z)] = p[(y * w + z) * c + k];
    std::copy(tmp.begin(), tmp.end(), p);
  }
}

// No NaN or Inf in p[0, n): an exponent test on the bits, which vectorises
// (std::isfinite in a loop does not).
bool all_finite(const float* p, size_t n) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, p + i, sizeof bits);
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

} // namespace

void to_host(const training_spec& spec, const batch& b, host_batch& out,
             const std::string& reference) {
  auto field = [&](const std::string& name) -> const tensor& {
    if (auto* t = b.find(name))
      return *t;
    std::string have;
    for (auto& f : b.fields)
      have += (have.empty() ? "" : ", ") + f.name;
    throw input_error("the batch has no field '" + name + "' (it has: " + have
                      + ")");
  };
  auto& x = field(spec.input);
  auto n = x.rows();
  if (n < 1 || x.shape().empty())
    throw input_error("field '" + spec.input
                                + "' holds no records");
  std::vector<int64_t> sample(x.shape().begin() + 1, x.shape().end());
  auto want = per_sample(spec.model.input_shape);
  if (per_sample(sample) != want)
    throw input_error(
      "field '" + spec.input + "' has "
      + std::to_string(per_sample(sample)) + " values per record (shape "
      + (sample.empty() ? std::string{"scalar"} : shape_string(sample))
      + "), the model's input_shape " + shape_string(spec.model.input_shape)
      + " needs " + std::to_string(want));
  out.n = static_cast<int>(n);
  out.epoch = b.epoch;
  auto total = n * want;
  bool embedding = !spec.model.layers.empty()
                   && spec.model.layers.front().type == "embedding";
  out.x.clear();
  out.local.clear();
  out.rows.clear();
  if (embedding) {
    if (!is_int(x.type()))
      throw input_error("field '" + spec.input
                                  + "' feeds an embedding and must hold "
                                    "integer ids, not "
                                  + dtype_name(x.type()));
    auto rows = spec.model.layers.front().rows;
    std::unordered_map<int64_t, int32_t> local;
    local.reserve(static_cast<size_t>(total));
    out.local.resize(static_cast<size_t>(total));
    for (int64_t i = 0; i < total; ++i) {
      auto id = int_at(x, i);
      if (id < 0 || id >= rows)
        throw input_error(
          "field '" + spec.input + "' record "
          + std::to_string(i / want) + " holds id " + std::to_string(id)
          + ", outside the embedding table's rows [0, " + std::to_string(rows)
          + ")");
      auto [it, added] =
        local.emplace(id, static_cast<int32_t>(out.rows.size()));
      if (added)
        out.rows.push_back(id);
      out.local[static_cast<size_t>(i)] = it->second;
    }
  } else {
    out.x.resize(static_cast<size_t>(total));
    switch (x.type()) {
      case dtype::f32:
        std::memcpy(out.x.data(), x.data(),
                    static_cast<size_t>(total) * sizeof(float));
        break;
      case dtype::u8: {
        auto* p = x.data_as<uint8_t>();
        for (int64_t i = 0; i < total; ++i)
          out.x[static_cast<size_t>(i)] = static_cast<float>(p[i]) / 255.0f;
        break;
      }
      case dtype::f64: {
        auto* p = x.data_as<double>();
        for (int64_t i = 0; i < total; ++i)
          out.x[static_cast<size_t>(i)] = static_cast<float>(p[i]);
        break;
      }
      default:
        throw input_error("field '" + spec.input
                                    + "' is " + dtype_name(x.type())
                                    + "; the model takes f32, f64 or u8 "
                                      "(scaled to [0, 1])");
    }
    // Images come out of image_decode as [height, width, channels]; conv2d
    // takes [channels, height, width]. With one channel both are the same
    // bytes; with more, the samples are transposed here.
    auto& want_shape = spec.model.input_shape;
    if (sample.size() == 3 && want_shape.size() == 3 && want_shape[0] > 1
        && sample[2] == want_shape[0] && sample[0] == want_shape[1]
        && sample[1] == want_shape[2])
      hwc_to_chw(out.x, n, sample[0], sample[1], sample[2]);
  }
  auto& y = field(spec.label);
  if (y.rows() != n || y.elements() != n || !is_int(y.type()))
    throw input_error(
      "label field '" + spec.label
      + "' must hold one integer per record (" + std::to_string(n)
      + "), got " + dtype_name(y.type()) + " with "
      + std::to_string(y.elements()) + " values");
  out.classes.clear();
  out.binary.clear();
  if (spec.softmax()) {
    auto classes = gpu::output_width(spec.model);
    out.classes.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      auto v = int_at(y, i);
      if (v < 0 || v >= classes)
        throw input_error(
          "label " + std::to_string(v) + " of record "
          + std::to_string(i) + " (epoch " + std::to_string(b.epoch)
          + ") is outside the model's classes [0, " + std::to_string(classes)
          + ")");
      out.classes[static_cast<size_t>(i)] = static_cast<int32_t>(v);
    }
  } else {
    out.binary.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      auto v = int_at(y, i);
      if (v != 0 && v != 1)
        throw input_error(
          "label " + std::to_string(v) + " of record "
          + std::to_string(i)
          + " is not 0 or 1 (sigmoid_binary_cross_entropy)");
      out.binary[static_cast<size_t>(i)] = static_cast<float>(v);
    }
  }
  out.reference.clear();
  if (!reference.empty()) {
    auto& r = field(reference);
    if (r.type() != dtype::f32 || r.elements() != n)
      throw input_error("reference field '" + reference
                                  + "' must hold one f32 per record");
    out.reference.assign(r.data_as<float>(), r.data_as<float>() + n);
  }
}

// --- ps_client ---------------------------------------------------------------

// Requests to shards time out after this and are sent again (see await).
constexpr auto patience = std::chrono::seconds{2};
// The requests await() waits for carry no CAF timeout: await() keeps the
// time itself. In CAF 0.17 a request's timeout fires even after the answer
// came, and a blocking actor never takes that stale timeout message out
// of its mailbox: at thousands of requests a second, the mailbox grew by
// as many messages and every receive scanned them all (a job's steps per
// second fell by 100x within a minute).
const caf::duration awaited{caf::infinite};
// How long a shard that keeps a request waiting may take to answer stats
// requests before it counts as lost (it answers between two updates).
constexpr auto probe_patience = std::chrono::seconds{10};
// How often a client waiting for a shard's answer looks for the
// coordinator's word that the shard is lost (ps_gone_atom).
constexpr auto notice_slice = std::chrono::milliseconds{200};
// How long the coordinator may take to restore a lost shard elsewhere
// (connect to a node, spawn, load the checkpoint's slice).
constexpr auto locate_patience = std::chrono::seconds{120};

// One CAF message of many MiB crosses processes slowly (docs/benchmarks.md,
// bench/ps_throughput): dense values travel in parts of about this size.
constexpr size_t default_part_bytes = size_t{4} << 20;
constexpr size_t default_window = 8;

struct ps_client::impl {
  caf::actor_system& sys;
  std::vector<caf::actor> shards;
  const training_spec& spec;
  uint32_t worker;
  caf::actor coordinator; // asked for a lost shard's replacement, if set
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
  size_t window = default_window;
  std::vector<std::vector<uint64_t>> line_base; // [shard][var]
  std::vector<uint64_t> line_size;              // [shard] elements
  // The outstanding pull (pull_async): its requests (one per shard, or one
  // per part) in the order they go out; the first `pending.size()` are out.
  using pull_handle = decltype(std::declval<caf::scoped_actor&>()->request(
    caf::actor{}, awaited, ps_pull_atom::value, ps_pull{}));
  std::vector<pull_handle> pending;
  std::vector<ps_pull> pending_req;     // all of them, kept to ask again
  std::vector<uint32_t> pending_shard;  // the shard of each
  bool pulling = false;
  std::vector<int64_t> pending_rows;
  std::chrono::steady_clock::time_point pull_begin;
  // The outstanding push: its messages (one per shard, or one per part).
  using push_handle = decltype(std::declval<caf::scoped_actor&>()->request(
    caf::actor{}, awaited, ps_push_atom::value, ps_push{}));
  std::vector<push_handle> pushes;
  std::vector<ps_push> pushes_req;     // kept to send again
  std::vector<uint32_t> pushes_shard;  // the shard of each
  std::vector<bool> down;              // per shard, from its monitor
  std::vector<bool> gone;              // per shard, the coordinator says
  uint64_t network_bytes = 0; // slices to and from shards on other nodes

  bool remote(uint32_t s) const { return shards[s].node() != self->node(); }
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

  void send_pull(size_t i) {
    pending.push_back(self->request(shards[pending_shard[i]], awaited,
                                    ps_pull_atom::value, pending_req[i]));
  }

  // Waits for the answer to `h` from shard s. A request that times out is
  // sent again (resend() makes a new one), after checking that the shard is
  // still there: pulls and waits are harmless to repeat, and a repeated
  // push is recognised by its step and applied once. So a shard that is
  // lost or frozen (the middleman's heartbeat closes its connection) fails
  // the call within about `patience`, instead of never.
  template <class Handle, class Resend, class Ok>
  void await(size_t s, Handle& h, Resend resend, Ok ok) {
    for (;;) {
      bool again = false;
      auto deadline = std::chrono::steady_clock::now() + patience;
      // In slices, to hear at once when the coordinator says the shard is
      // lost: its answer will not come (and CAF 0.17 gives the request no
      // error for a lost node until it times out).
      for (;;) {
        bool tick = false;
        caf::blocking_actor::accept_one_cond rc;
        self->varargs_receive(
          rc, h.id(), ok,
          [&](caf::error& err) {
            if (err == caf::sec::request_timeout
                || err == caf::sec::request_receiver_down)
              again = true;
            else
              fail(s, err);
          },
          caf::after(notice_slice) >> [&] { tick = true; });
        if (!tick)
          break;
        if (take_downs(s) || gone[s]
            || std::chrono::steady_clock::now() >= deadline) {
          again = true; // its late answer, if any, is left unread
          break;
        }
      }
      if (!again)
        return;
      check_down(s);
      h = resend();
    }
  }

  // Takes the down messages of monitored shards; true if shard s is gone.
  bool take_downs(size_t s) {
    for (bool more = true; more;)
      self->receive(
        [&](caf::down_msg& dm) {
          for (size_t k = 0; k < shards.size(); ++k)
            if (shards[k].address() == dm.source)
              down[k] = true;
          if (coordinator && coordinator.address() == dm.source)
            coordinator_down = true;
        },
        [&](ps_gone_atom, const std::string& label) {
          for (size_t k = 0; k < shards.size(); ++k)
            if (name_of(k) == label)
              gone[k] = true;
        },
        caf::after(std::chrono::seconds{0}) >> [&] { more = false; });
    return down[s];
  }

  // After a request to shard s timed out or bounced: returns once shard s
  // answers (the same shard, or its replacement), or throws. No down
  // message does not mean alive: across hosts this process may reach the
  // shard only through the coordinator's node, and CAF 0.17 does not tell
  // us when that node loses the shard's. So the coordinator, which is
  // connected to every node and hears of a lost one at once (or within the
  // heartbeat timeout), is asked first; then the shard is sent a stats
  // request, which a live shard answers at once even while it holds our
  // request back (a staleness bound). That repeats every `patience` until
  // the shard answers, is replaced, or `probe_patience` passed.
  void check_down(size_t s) {
    if (take_downs(s); gone[s]) {
      // The coordinator said so: wait for its replacement. (A word about
      // a shard this worker replaced already finds the same one again.)
      gone[s] = false;
      if (locate(s, locate_patience))
        return;
    }
    auto deadline = std::chrono::steady_clock::now() + probe_patience;
    for (;;) {
      if (take_downs(s)) {
        replace(s, "went down");
        return;
      }
      if (coordinator && locate(s, patience))
        return;
      bool answered = false;
      caf::error failure;
      self->request(shards[s], patience, ps_stats_atom::value)
        .receive([&](ps_shard_stats&) { answered = true; },
                 [&](caf::error& err) { failure = std::move(err); });
      if (answered)
        return;
      if (failure == caf::sec::request_timeout
          && std::chrono::steady_clock::now() < deadline)
        continue;
      down[s] = true;
      replace(s, "does not answer (" + caf::to_string(failure)
                   + "): its node is lost or frozen");
      return;
    }
  }

  std::string name_of(size_t s) const {
    return std::string{ps_service} + "[" + std::to_string(s) + "]";
  }

  // Asks the coordinator where shard s is (ps_locate_atom, ps.hpp): true
  // once it was replaced (and this worker registered with the new one),
  // false if the coordinator still has the same shard. The answer waits
  // while the coordinator restores the shard; an error (the job cannot go
  // on without it) throws.
  bool locate(size_t s, std::chrono::seconds timeout) {
    caf::actor fresh;
    caf::error failure;
    // In slices of `patience`, so that losing the coordinator too (this
    // node cut off) fails the call at once rather than after `timeout`.
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      failure = caf::error{};
      self
        ->request(coordinator, std::min<std::chrono::seconds>(timeout,
                                                               patience),
                  ps_locate_atom::value, name_of(s))
        .receive([&](caf::actor& a) { fresh = std::move(a); },
                 [&](caf::error& err) { failure = std::move(err); });
      if (failure != caf::sec::request_timeout)
        break;
      take_downs(s);
      if (coordinator_down)
        throw std::runtime_error("parameter server " + name_of(s)
                                 + " does not answer, and the job's "
                                   "coordinator is gone too");
      if (std::chrono::steady_clock::now() >= deadline)
        return false; // busy restoring it: ask again later
    }
    if (failure)
      throw std::runtime_error("parameter server " + name_of(s)
                               + " is lost, and it was not restored: "
                               + sys.render(failure));
    if (fresh == shards[s])
      return false;
    self->demonitor(shards[s]);
    shards[s] = std::move(fresh);
    down[s] = false;
    self->monitor(shards[s]);
    if (worker == ps_observer)
      return true;
    self
      ->request(shards[s], locate_patience, ps_register_atom::value, worker,
                clock)
      .receive([&](uint64_t version) { read_version[s] = version; },
               [&](caf::error& err) { failure = std::move(err); });
    if (failure)
      throw std::runtime_error("parameter server " + name_of(s)
                               + " (restored) refused worker "
                               + std::to_string(worker) + ": "
                               + sys.render(failure));
    spdlog::info("worker {} joined the restored {} at clock {}", worker,
                 name_of(s), clock);
    return true;
  }

  // Shard s is lost (`why`): without a coordinator that fails the call;
  // else the coordinator's answer replaces it (and this worker registers
  // there with its clock). A coordinator that still has the same shard
  // means this worker alone cannot reach it.
  void replace(size_t s, const std::string& why) {
    if (!coordinator)
      throw std::runtime_error("parameter server " + name_of(s) + " " + why);
    spdlog::warn("parameter server {} {}; asking the coordinator for its "
                 "replacement",
                 name_of(s), why);
    if (!locate(s, locate_patience))
      throw std::runtime_error("parameter server " + name_of(s) + " " + why
                               + ", yet the coordinator still reaches it: "
                                 "this worker lost its own connection");
  }

  // The acknowledgements of the outstanding push. Of a push in parts only
  // the part that completed it carries the staleness (the others say 0):
  // a shard's staleness is the largest of its parts'.
  void collect_acks(push_result& result) {
    if (pushes.empty())
      return;
    auto waiting = std::move(pushes);
    auto sent = std::move(pushes_req);
    auto of = std::move(pushes_shard);
    pushes.clear();
    pushes_req.clear();
    pushes_shard.clear();
    std::vector<uint64_t> per_shard(shards.size(), 0);
    for (size_t i = 0; i < waiting.size(); ++i)
      await(
        of[i], waiting[i],
        [&] {
          return self->request(shards[of[i]], awaited, ps_push_atom::value,
                               sent[i]);
        },
        [&](const ps_push_ack& ack) {
          per_shard[of[i]] = std::max(per_shard[of[i]], ack.staleness);
          result.staleness_max = std::max(result.staleness_max, ack.staleness);
          result.acknowledged = true;
        });
    uint64_t sum = 0;
    for (auto x : per_shard)
      sum += x;
    result.staleness_mean = static_cast<double>(sum) / shards.size();
    failpoint("ps.push.acked");
  }

  impl(caf::actor_system& s, std::vector<caf::actor> sh,
       const training_spec& sp, uint32_t w, caf::actor c)
    : sys(s), shards(std::move(sh)), spec(sp), worker(w),
      coordinator(std::move(c)), self(s) {
    census_add(caf::actor_cast<caf::actor>(self),
               "PS client of worker " + std::to_string(worker));
    read_version.assign(shards.size(), 0);
    down.assign(shards.size(), false);
    gone.assign(shards.size(), false);
    for (auto& shard : shards)
      self->monitor(shard);
    if (coordinator) {
      self->monitor(coordinator);
      self->send(coordinator, ps_watch_atom::value);
    }
    for (size_t i = 0; i < spec.params.size(); ++i)
      if (spec.params[i].sparse)
        sparse = static_cast<int>(i);
    residual.resize(spec.params.size());
    auto k = static_cast<uint32_t>(shards.size());
    line_base.assign(k, std::vector<uint64_t>(spec.params.size(), 0));
    line_size.assign(k, 0);
    for (uint32_t s = 0; s < k; ++s)
      for (size_t i = 0; i < spec.params.size(); ++i) {
        if (spec.params[i].sparse)
          continue;
        auto r =
          ps_dense_slice(static_cast<uint64_t>(spec.params[i].size()), s, k);
        line_base[s][i] = line_size[s];
        line_size[s] += r.hi - r.lo;
      }
  }

  [[noreturn]] void fail(size_t shard, const caf::error& err) {
    throw std::runtime_error("parameter server ps[" + std::to_string(shard)
                             + "]: " + sys.render(err));
  }

  auto uint32(size_t v) { return static_cast<uint32_t>(v); }
};

ps_client::ps_client(caf::actor_system& sys, std::vector<caf::actor> shards,
                     const training_spec& spec, uint32_t worker,
                     caf::actor coordinator)
  : impl_(std::make_unique<impl>(sys, std::move(shards), spec, worker,
                                 std::move(coordinator))) {
  if (impl_->shards.empty())
    throw std::invalid_argument("the job has no parameter-server shards");
}

ps_client::~ps_client() = default;

void ps_client::join() {
  auto& d = *impl_;
  for (size_t s = 0; s < d.shards.size(); ++s) {
    auto ask = [&] {
      return d.self->request(d.shards[s], awaited, ps_register_atom::value,
                             d.worker);
    };
    auto h = ask();
    d.await(s, h, ask,
            [&](uint64_t version) { d.read_version[s] = version; });
  }
}

void ps_client::leave() {
  auto& d = *impl_;
  flush();
  for (size_t s = 0; s < d.shards.size(); ++s) {
    auto ask = [&] {
      return d.self->request(d.shards[s], awaited, ps_done_atom::value,
                             d.worker);
    };
    auto h = ask();
    d.await(s, h, ask, [](uint64_t) {});
  }
}

void ps_client::pause() {
  auto& d = *impl_;
  flush();
  for (size_t s = 0; s < d.shards.size(); ++s) {
    auto ask = [&] {
      return d.self->request(d.shards[s], awaited, ps_pause_atom::value,
                             d.worker);
    };
    auto h = ask();
    d.await(s, h, ask, [](uint64_t) {});
  }
}

void ps_client::pull_async(uint64_t clock, const std::vector<int64_t>& rows) {
  auto& d = *impl_;
  if (d.pulling)
    throw std::logic_error("ps_client: a pull is already outstanding");
  auto k = static_cast<uint32_t>(d.shards.size());
  d.pull_begin = std::chrono::steady_clock::now();
  std::vector<ps_pull> requests(k);
  for (uint32_t s = 0; s < k; ++s) {
    requests[s].worker = d.worker;
    requests[s].clock = clock;
  }
  if (d.sparse >= 0) {
    std::vector<std::vector<int64_t>> owned(k);
    for (auto r : rows)
      owned[ps_row_shard(r, k)].push_back(r);
    for (uint32_t s = 0; s < k; ++s) {
      ps_slice want;
      want.var = static_cast<uint32_t>(d.sparse);
      want.index =
        tensor::allocate(dtype::i64, {static_cast<int64_t>(owned[s].size())});
      if (!owned[s].empty())
        std::memcpy(want.index.mutable_data(), owned[s].data(),
                    owned[s].size() * sizeof(int64_t));
      requests[s].rows.push_back(std::move(want));
    }
    d.pending_rows = rows;
  }
  // Large slices in parts, part p of every shard before part p + 1 of
  // any; sparse rows go with part 0.
  std::vector<uint32_t> parts(k);
  uint32_t most = 0;
  for (uint32_t s = 0; s < k; ++s) {
    parts[s] = d.parts_of(s);
    most = std::max(most, parts[s]);
  }
  d.pending.clear();
  d.pending_req.clear();
  d.pending_shard.clear();
  for (uint32_t p = 0; p < most; ++p)
    for (uint32_t s = 0; s < k; ++s) {
      if (p >= parts[s])
        continue;
      auto req = p == 0 ? requests[s] : ps_pull{};
      req.worker = d.worker;
      req.clock = clock;
      req.part = p;
      req.parts = parts[s];
      d.pending_req.push_back(std::move(req));
      d.pending_shard.push_back(s);
    }
  auto first = d.window == 0 ? d.pending_req.size()
                             : std::min(d.pending_req.size(),
                                        std::max<size_t>(d.window, k));
  d.pending.reserve(d.pending_req.size());
  for (size_t i = 0; i < first; ++i)
    d.send_pull(i);
  d.pulling = true;
}

double ps_client::pull(gpu::model& m, uint64_t clock,
                       const std::vector<int64_t>& rows) {
  pull_async(clock, rows);
  return pull_wait(m);
}

double ps_client::pull_wait(gpu::model& m) {
  auto& d = *impl_;
  auto k = static_cast<uint32_t>(d.shards.size());
  if (!d.pulling)
    throw std::logic_error("ps_client: no pull is outstanding");
  // Hand the handles over first: a failure below must not leave them.
  auto pending = std::move(d.pending);
  auto asked = std::move(d.pending_req);
  auto of = std::move(d.pending_shard);
  d.pending.clear();
  d.pending_req.clear();
  d.pending_shard.clear();
  d.pulling = false;
  // A pull in parts read the version of its oldest part.
  std::vector<bool> seen(k, false);
  if (d.sparse >= 0) {
    auto& rows = d.pending_rows;
    d.local.clear();
    for (size_t j = 0; j < rows.size(); ++j)
      d.local.emplace(rows[j], static_cast<int32_t>(j));
    m.set_local_rows(static_cast<size_t>(d.sparse),
                     static_cast<int64_t>(rows.size()));
    d.host.assign(rows.size()
                    * static_cast<size_t>(d.spec.params[d.sparse].row_size()),
                  0.0f);
  }
  auto& dev = m.dev();
  for (size_t i = 0; i < asked.size(); ++i) {
    auto s = of[i];
    if (i >= pending.size()) // (the window is at least 1)
      pending.push_back(d.self->request(d.shards[s], awaited,
                                        ps_pull_atom::value, asked[i]));
    d.await(
      s, pending[i],
      [&] {
        return d.self->request(d.shards[s], awaited, ps_pull_atom::value,
                               asked[i]);
      },
      [&](ps_params& p) {
        if (d.remote(s))
          d.network_bytes += impl::bytes_of(p.slices);
        d.read_version[s] =
          seen[s] ? std::min(d.read_version[s], p.version) : p.version;
        seen[s] = true;
        for (auto& sl : p.slices) {
          if (sl.var >= d.spec.params.size())
            throw std::runtime_error("parameter server sent an unknown "
                                     "variable");
          auto& spec = d.spec.params[sl.var];
          if (spec.sparse) {
            auto dim = static_cast<size_t>(spec.row_size());
            auto* ids = sl.index.data_as<int64_t>();
            auto* vals = sl.values.data_as<float>();
            for (int64_t r = 0; r < sl.index.elements(); ++r) {
              auto it = d.local.find(ids[r]);
              if (it == d.local.end())
                continue;
              std::memcpy(d.host.data() + static_cast<size_t>(it->second) * dim,
                          vals + static_cast<size_t>(r) * dim,
                          dim * sizeof(float));
            }
          } else {
            auto n = static_cast<uint64_t>(sl.values.elements());
            if (sl.offset + n > static_cast<uint64_t>(spec.size()))
              throw std::runtime_error("parameter server sent a slice "
                                       "outside variable "
                                       + spec.name);
            dev.upload(m.value(sl.var).f32() + sl.offset, sl.values.data(),
                       n * sizeof(float));
          }
        }
      });
    // Keep the window full: one more part out for each that came in.
    if (pending.size() < asked.size()) {
      auto j = pending.size();
      pending.push_back(d.self->request(d.shards[of[j]], awaited,
                                        ps_pull_atom::value, asked[j]));
    }
  }
  if (d.sparse >= 0)
    dev.upload(m.value(static_cast<size_t>(d.sparse)).get(), d.host.data(),
               d.host.size() * sizeof(float));
  return std::chrono::duration<double>(std::chrono::steady_clock::now()
                                       - d.pull_begin)
    .count();
}

ps_client::push_result ps_client::push(gpu::model& m, uint64_t step,
                                       uint64_t samples,
                                       const std::vector<int64_t>& rows,
                                       double topk_fraction) {
  auto& d = *impl_;
  failpoint("ps.push.before");
  auto k = static_cast<uint32_t>(d.shards.size());
  push_result result;
  std::vector<ps_push> pushes(k);
  for (uint32_t s = 0; s < k; ++s) {
    pushes[s].worker = d.worker;
    pushes[s].step = step;
    pushes[s].read_version = d.read_version[s];
    pushes[s].samples = samples;
  }
  // Dense gradients in parts when large (not top-k: those are small): the
  // shard's slices laid end to end, cut into parts[s] equal pieces as a
  // pull is; part 0 also takes the sparse and top-k slices.
  std::vector<uint32_t> parts(k, 1);
  std::vector<std::vector<std::vector<ps_slice>>> pieces(k);
  for (uint32_t s = 0; s < k; ++s) {
    if (topk_fraction <= 0)
      parts[s] = d.parts_of(s);
    pieces[s].resize(parts[s]);
  }
  auto& dev = m.dev();
  std::vector<float> g;
  if (topk_fraction > 0) {
    // Error feedback changes the residuals as it goes: find a NaN or Inf
    // first, so that a skipped step leaves every residual as it was.
    for (size_t i = 0; i < d.spec.params.size(); ++i) {
      auto& spec = d.spec.params[i];
      auto count = spec.sparse
                     ? rows.size() * static_cast<size_t>(spec.row_size())
                     : static_cast<size_t>(spec.size());
      g.resize(count);
      dev.download(g.data(), m.grad(i).get(), count * sizeof(float));
      if (!all_finite(g.data(), count)) {
        result.nonfinite = spec.name;
        break;
      }
    }
  }
  for (size_t i = 0; i < d.spec.params.size() && result.nonfinite.empty();
       ++i) {
    auto& spec = d.spec.params[i];
    auto var = static_cast<uint32_t>(i);
    auto count = spec.sparse ? rows.size() * static_cast<size_t>(spec.row_size())
                             : static_cast<size_t>(spec.size());
    if (!spec.sparse && topk_fraction <= 0) {
      // Straight from the device into the pushed slices: one copy.
      for (uint32_t s = 0; s < k; ++s) {
        auto range = ps_dense_slice(count, s, k);
        auto n = range.hi - range.lo;
        auto base = d.line_base[s][i];
        for (uint32_t p = 0; p < parts[s]; ++p) {
          // This variable's elements in part p (parts[s] = 1: all).
          auto cut = ps_dense_slice(d.line_size[s], p, parts[s]);
          auto lo = std::max(cut.lo, base);
          auto hi = std::min(cut.hi, base + n);
          if (parts[s] == 1 || (n == 0 && p == 0))
            lo = base, hi = base + n; // (an empty slice goes in part 0)
          else if (lo >= hi)
            continue;
          auto e = hi - lo;
          ps_slice sl;
          sl.var = var;
          sl.offset = range.lo + (lo - base);
          sl.values = tensor::allocate(dtype::f32, {static_cast<int64_t>(e)});
          if (e > 0) {
            dev.download(sl.values.mutable_data(),
                         m.grad(i).f32() + sl.offset, e * sizeof(float));
            if (!all_finite(sl.values.data_as<float>(), e))
              result.nonfinite = spec.name;
          }
          // One part: in pushes[s] in variable order, as ever.
          (parts[s] == 1 ? pushes[s].grads : pieces[s][p])
            .push_back(std::move(sl));
        }
      }
      continue;
    }
    g.resize(count);
    dev.download(g.data(), m.grad(i).get(), count * sizeof(float));
    if (!all_finite(g.data(), count)) {
      result.nonfinite = spec.name;
      break;
    }
    if (spec.sparse) {
      auto dim = static_cast<size_t>(spec.row_size());
      std::vector<std::vector<size_t>> owned(k);
      for (size_t j = 0; j < rows.size(); ++j)
        owned[ps_row_shard(rows[j], k)].push_back(j);
      for (uint32_t s = 0; s < k; ++s) {
        auto r = static_cast<int64_t>(owned[s].size());
        ps_slice sl;
        sl.var = var;
        sl.index = tensor::allocate(dtype::i64, {r});
        sl.values = tensor::allocate(dtype::f32, {r, spec.row_size()});
        auto* ids = sl.index.mutable_data_as<int64_t>();
        auto* vals = sl.values.mutable_data_as<float>();
        for (size_t j = 0; j < owned[s].size(); ++j) {
          ids[j] = rows[owned[s][j]];
          std::memcpy(vals + j * dim, g.data() + owned[s][j] * dim,
                      dim * sizeof(float));
        }
        pushes[s].grads.push_back(std::move(sl));
      }
    } else {
      auto& res = d.residual[i];
      res.resize(count, 0.0f);
      for (size_t j = 0; j < count; ++j)
        g[j] += res[j];
      auto keep = std::max<size_t>(
        1, static_cast<size_t>(topk_fraction * static_cast<double>(count)));
      keep = std::min(keep, count);
      std::vector<float> mags(count);
      for (size_t j = 0; j < count; ++j)
        mags[j] = std::fabs(g[j]);
      std::nth_element(mags.begin(),
                       mags.begin() + static_cast<std::ptrdiff_t>(count - keep),
                       mags.end());
      auto threshold = mags[count - keep];
      std::vector<std::vector<int64_t>> idx(k);
      std::vector<std::vector<float>> val(k);
      size_t sent = 0;
      uint32_t s = 0;
      auto range = ps_dense_slice(count, 0, k);
      for (size_t j = 0; j < count; ++j) {
        while (j >= range.hi && s + 1 < k)
          range = ps_dense_slice(count, ++s, k);
        if (sent < keep && std::fabs(g[j]) >= threshold) {
          idx[s].push_back(static_cast<int64_t>(j));
          val[s].push_back(g[j]);
          res[j] = 0.0f;
          ++sent;
        } else {
          res[j] = g[j];
        }
      }
      for (uint32_t t = 0; t < k; ++t) {
        ps_slice sl;
        sl.var = var;
        auto r = static_cast<int64_t>(idx[t].size());
        sl.index = tensor::allocate(dtype::i64, {r});
        sl.values = tensor::allocate(dtype::f32, {r});
        if (r > 0) {
          std::memcpy(sl.index.mutable_data(), idx[t].data(),
                      idx[t].size() * sizeof(int64_t));
          std::memcpy(sl.values.mutable_data(), val[t].data(),
                      val[t].size() * sizeof(float));
        }
        pushes[t].grads.push_back(std::move(sl));
      }
    }
  }
  // One message per shard, or one per part: the sparse and top-k slices
  // (in pushes[s] so far) go with part 0.
  std::vector<ps_push> messages;
  std::vector<uint32_t> to;
  for (uint32_t s = 0; s < k; ++s) {
    if (!result.nonfinite.empty()) {
      pushes[s].grads.clear();
      pushes[s].samples = 0;
      messages.push_back(std::move(pushes[s])); // the clock only
      to.push_back(s);
      continue;
    }
    for (uint32_t p = 0; p < parts[s]; ++p) {
      ps_push msg;
      msg.worker = pushes[s].worker;
      msg.step = pushes[s].step;
      msg.read_version = pushes[s].read_version;
      msg.samples = pushes[s].samples;
      msg.part = p;
      msg.parts = parts[s];
      // Variables in order as before: dense pieces, then part 0's others.
      msg.grads = std::move(pieces[s][p]);
      if (p == 0)
        for (auto& sl : pushes[s].grads)
          msg.grads.push_back(std::move(sl));
      messages.push_back(std::move(msg));
      to.push_back(s);
    }
  }
  // The previous push's acknowledgements come in now, not right after it
  // was sent: the shards apply a push while the worker computes the next.
  d.collect_acks(result);
  d.pushes.reserve(messages.size());
  for (size_t j = 0; j < messages.size(); ++j) {
    if (d.remote(to[j]))
      d.network_bytes += impl::bytes_of(messages[j].grads);
    d.pushes.push_back(d.self->request(d.shards[to[j]], awaited,
                                       ps_push_atom::value, messages[j]));
  }
  failpoint("ps.push.sent");
  d.pushes_req = std::move(messages);
  d.pushes_shard = std::move(to);
  d.clock = std::max(d.clock, step);
  return result;
}

uint64_t ps_client::network_bytes() const noexcept {
  return impl_->network_bytes;
}

uint64_t ps_client::read_version() const noexcept {
  return impl_->read_version.empty() ? 0 : impl_->read_version[0];
}

void ps_client::set_part_bytes(size_t bytes, size_t window) {
  impl_->part_bytes = bytes;
  impl_->window = window;
}

ps_client::push_result ps_client::flush() {
  push_result result;
  impl_->collect_acks(result);
  return result;
}

ps_progress ps_client::wait(uint64_t steps) {
  auto& d = *impl_;
  ps_progress result;
  auto ask = [&] {
    return d.self->request(d.shards[0], awaited, ps_wait_atom::value, steps);
  };
  auto h = ask();
  d.await(0, h, ask, [&](const ps_progress& p) { result = p; });
  return result;
}

} // namespace af
