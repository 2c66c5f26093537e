// The engine side of actorflow.Pipeline.iterate(): a job that runs in this
// process, in an actor system of its own, under af::supervise (on a thread
// of its own: autotune, stopping and aborting, starting again after a lost
// node, as `actorflow run` does), and hands the batches of one of its
// `outlet` stages to the thread that iterates. Declared in
// python/src/stream.hpp.
#include "python/src/stream.hpp"

#include <atomic>
#include <condition_variable>
#include <future>
#include <cstdio>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/logger.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include "actorflow/actors/builtin.hpp"
#include "actorflow/runtime/core/census.hpp"
#include "actorflow/runtime/job/supervisor.hpp"
#include "actorflow/runtime/net/system.hpp"
#include "actorflow/runtime/stage/registry.hpp"

namespace af::py {

namespace {

// From the iterating thread to the receiver: one batch was handed out
// (answer the oldest), or nothing more will be (answer all, and every
// batch still to come at once).
using consumed_atom = caf::atom_constant<caf::atom("pyconsume")>;
using discard_atom = caf::atom_constant<caf::atom("pydiscard")>;

} // namespace

// What the receiver and the iterating thread share.
struct stream::channel {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<batch> ready;
  bool discard = false;
  bool done = false;
  run_result result;
  std::optional<job_progress> progress;
};

namespace {

using channel = stream::channel;

struct receiver_state {
  std::deque<caf::response_promise> unanswered;
};

caf::behavior receiver(caf::stateful_actor<receiver_state>* self,
                       std::shared_ptr<channel> ch) {
  return {
    [=](outlet_atom, const std::string&, const batch& b) {
      {
        std::lock_guard<std::mutex> lock{ch->mutex};
        if (ch->discard)
          return; // the void handler answers at once
        ch->ready.push_back(b);
      }
      ch->changed.notify_all();
      // Answered when the batch is handed out (consumed_atom).
      self->state.unanswered.push_back(self->make_response_promise());
    },
    [=](consumed_atom) {
      auto& u = self->state.unanswered;
      if (!u.empty()) {
        u.front().deliver(caf::unit);
        u.pop_front();
      }
    },
    [=](discard_atom) {
      for (auto& rp : self->state.unanswered)
        rp.deliver(caf::unit);
      self->state.unanswered.clear();
    },
    [=](job_progress_atom, const job_progress& p) {
      std::lock_guard<std::mutex> lock{ch->mutex};
      ch->progress = p;
    },
    // Each start's end: the supervisor may start the job again (a lost
    // node), so the iteration ends when it returns (stream::state), not
    // here.
    [=](job_done_atom, const run_result& r) {
      std::lock_guard<std::mutex> lock{ch->mutex};
      ch->progress = r.final;
    },
  };
}

// CAF 0.17 keeps its logger alive through a thread-local reference on every
// thread that made or used an actor system (caf::logger::
// set_current_actor_system), and ~actor_system() waits until the logger
// is gone. A system made on Python's thread and destroyed on another
// would wait forever: each call that used CAF on the caller's thread
// drops that reference before it returns.
void release_logger() noexcept {
  caf::logger::set_current_actor_system(nullptr);
}

// Answers every batch at once: for the outlets that are not read. (The
// argument: CAF 0.17 trips UBSan on argument-less function actors.)
caf::behavior drain(caf::event_based_actor*, int) {
  return {[](outlet_atom, const std::string&, const batch&) {}};
}

std::string outlet_of(const loaded_topology& topo, const std::string& want) {
  std::vector<std::string> outlets;
  for (auto& s : topo.spec.stage())
    if (s.type() == "outlet")
      outlets.push_back(s.name());
  auto list = [&] {
    std::string l;
    for (auto& o : outlets)
      l += (l.empty() ? "'" : ", '") + o + "'";
    return l;
  };
  if (want.empty()) {
    if (outlets.size() == 1)
      return outlets.front();
    if (outlets.empty())
      throw std::invalid_argument(
        "the topology has no outlet stage: add one (type: \"outlet\") where "
        "the batches should reach Python");
    throw std::invalid_argument("the topology has several outlets (" + list()
                                + "): name the one to iterate (outlet=...)");
  }
  for (auto& o : outlets)
    if (o == want)
      return o;
  throw std::invalid_argument(
    "no outlet stage '" + want + "' in the topology"
    + (outlets.empty() ? std::string{": it has none"}
                       : " (its outlets: " + list() + ")"));
}

} // namespace

struct stream::state {
  std::shared_ptr<channel> ch = std::make_shared<channel>();
  // stop() asked, and when (once: a second interrupt would abort the
  // job). Guarded by ch->mutex.
  bool stopped = false;
  std::chrono::steady_clock::time_point stopped_at;
  // The supervisor's interrupts: stop() gives the first (the job drains,
  // or ends at a checkpoint's cut), close() a second one when the drain
  // takes too long (the job is aborted).
  std::atomic<int> interrupts{0};
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  registry reg;
  std::optional<loaded_topology> topo;
  caf::actor receiver;
  std::vector<caf::actor> drains;
  // Runs af::supervise; it sets ch->done when the job has ended for good.
  std::thread supervisor;

  ~state() {
    if (supervisor.joinable())
      supervisor.join();
    if (sys) {
      for (auto& a : drains)
        caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
      if (receiver)
        caf::anon_send_exit(receiver, caf::exit_reason::user_shutdown);
    }
    receiver = nullptr;
    drains.clear();
    sys.reset(); // waits for every actor of the job
  }
};

stream::stream(const loaded_topology& topo, const stream_options& opts)
  : state_{std::make_shared<state>()},
    channel_{state_->ch},
    outlet_{outlet_of(topo, opts.outlet)},
    epochs_{opts.epochs} {
  if (opts.epochs < 0)
    throw std::invalid_argument("epochs must be >= 1 (or None: as the "
                                "topology says)");
  auto& st = *state_;
  add_message_types(st.cfg);
  engine_options eo;
  eo.threads = opts.threads;
  apply(eo, st.cfg);
  enable_network(st.cfg);
  st.sys = std::make_unique<caf::actor_system>(st.cfg);
  register_builtin_stages(st.reg);
  st.receiver = st.sys->spawn(receiver, st.ch);
  job_options jo;
  jo.listener = st.receiver;
  jo.progress_interval = std::chrono::milliseconds{500};
  for (auto& s : topo.spec.stage()) {
    if (s.type() != "outlet")
      continue;
    if (s.name() == outlet_) {
      jo.outlets[s.name()] = st.receiver;
    } else {
      st.drains.push_back(st.sys->spawn(drain, 0));
      jo.outlets[s.name()] = st.drains.back();
    }
  }
  st.topo.emplace(topo);
  supervise_options so;
  so.job = std::move(jo);
  so.stop_hint = ""; // stopping is the iterator's own decision
  so.abort_reason = "the Python iterator was closed and the job did not "
                    "drain within the time allowed";
  auto* raw = &st;
  so.interrupts = [raw] { return raw->interrupts.load(); };
  // The constructor returns once the job has started, or throws why it
  // could not (as job::start did).
  auto first = std::make_shared<std::promise<std::string>>();
  auto told = std::make_shared<std::atomic<bool>>(false);
  auto tell = [first, told](std::string why) {
    if (!told->exchange(true))
      first->set_value(std::move(why));
  };
  so.started = [tell](job&, int) { tell({}); };
  st.supervisor = std::thread{[raw, so = std::move(so), tell]() mutable {
    auto run = supervise(*raw->sys, *raw->topo, raw->reg, std::move(so));
    tell(run.started ? std::string{} : run.result.error);
    {
      std::lock_guard<std::mutex> lock{raw->ch->mutex};
      raw->ch->done = true;
      raw->ch->result = run.result;
      raw->ch->progress = run.result.final;
    }
    raw->ch->changed.notify_all();
    release_logger();
  }};
  auto why = first->get_future().get();
  if (!why.empty()) {
    st.supervisor.join();
    release_logger();
    throw std::runtime_error(why);
  }
  release_logger();
}

stream::~stream() {
  close(std::chrono::seconds{10});
}

std::shared_ptr<stream::state> stream::current() const {
  std::lock_guard<std::mutex> lock{mutex_};
  return ended_ ? nullptr : state_;
}

void stream::end_with(const run_result& r) {
  std::lock_guard<std::mutex> lock{mutex_};
  if (!ended_) {
    result_ = r;
    ended_ = true;
  }
}

run_result stream::result() const {
  std::lock_guard<std::mutex> lock{mutex_};
  return result_;
}

stream::status stream::next(batch& out, std::chrono::milliseconds timeout) {
  auto st = current();
  if (!st)
    return status::end;
  auto& ch = *st->ch;
  std::unique_lock<std::mutex> lock{ch.mutex};
  for (;;) {
    if (!ch.changed.wait_for(lock, timeout,
                             [&] { return !ch.ready.empty() || ch.done; })) {
      // The supervisor's thread ends the iteration (ch.done) when the
      // job has ended for good.
      return status::waiting;
    }
    if (!ch.ready.empty()) {
      out = std::move(ch.ready.front());
      ch.ready.pop_front();
      caf::anon_send(st->receiver, consumed_atom::value);
      release_logger();
      if (epochs_ > 0 && out.epoch >= static_cast<uint64_t>(epochs_)) {
        // Past the epochs asked for: end the job, drop the rest.
        lock.unlock();
        stop();
        lock.lock();
        continue;
      }
      lock.unlock();
      // A batch a GPU stage left in device memory comes to the host here,
      // without the GIL, not when Python makes arrays of it.
      for (auto& f : out.fields)
        static_cast<void>(f.value.data());
      return status::batch;
    }
    auto r = ch.result;
    lock.unlock();
    end_with(r);
    return status::end;
  }
}

void stream::stop() {
  auto st = current();
  if (!st)
    return;
  {
    std::lock_guard<std::mutex> lock{st->ch->mutex};
    st->ch->discard = true;
    st->ch->ready.clear();
    if (st->stopped)
      return;
    st->stopped = true;
    st->stopped_at = std::chrono::steady_clock::now();
  }
  caf::anon_send(st->receiver, discard_atom::value);
  st->interrupts.fetch_add(1);
  release_logger();
}

void stream::close(std::chrono::milliseconds limit) {
  stop();
  std::shared_ptr<state> st;
  {
    std::lock_guard<std::mutex> lock{mutex_};
    st = std::move(state_);
  }
  if (!st)
    return;
  auto& ch = *st->ch;
  // The job's result once it has ended for good, within `within`.
  auto ended = [&](std::chrono::milliseconds within) {
    std::unique_lock<std::mutex> lock{ch.mutex};
    return ch.changed.wait_for(lock, within, [&] { return ch.done; })
             ? std::optional<run_result>{ch.result}
             : std::nullopt;
  };
  auto r = ended(limit);
  if (!r) {
    // A second interrupt aborts the job; the supervisor takes one only
    // 0.5 s after the first (runtime/job/supervisor.hpp).
    std::chrono::steady_clock::time_point at;
    {
      std::lock_guard<std::mutex> lock{ch.mutex};
      at = st->stopped_at;
    }
    std::this_thread::sleep_until(at + std::chrono::milliseconds{600});
    st->interrupts.fetch_add(1);
    r = ended(limit);
  }
  release_logger();
  if (r) {
    end_with(*r);
  } else {
    run_result failed;
    failed.error = "the job did not end after it was closed and aborted";
    end_with(failed);
  }
  // The actor system's destructor waits for every actor without a bound
  // (CAF 0.17): give it `limit`, then leave it behind.
  auto done = std::make_shared<std::promise<void>>();
  auto finished = done->get_future();
  std::thread t{[st = std::move(st), done]() mutable {
    st.reset();
    done->set_value();
  }};
  if (r && finished.wait_for(limit) == std::future_status::ready) {
    t.join();
  } else {
    std::fprintf(stderr, "actorflow: the job's actor system did not shut "
                         "down in time; leaving it behind\n");
    for (auto& line : census_alive())
      std::fprintf(stderr, "actorflow:   %s\n", line.c_str());
    t.detach();
  }
}

std::optional<job_progress> stream::progress() const {
  std::lock_guard<std::mutex> lock{channel_->mutex};
  return channel_->progress;
}

} // namespace af::py
