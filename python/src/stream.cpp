#include "python/src/stream.hpp"

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

#include "actors/builtin.hpp"
#include "runtime/census.hpp"
#include "runtime/registry.hpp"
#include "runtime/system.hpp"

namespace af::py {

namespace {

// From the iterating thread to the receiver: one batch was handed out
// (answer the oldest), or nothing more will be (answer all, and every
// batch still to come at once).
using consumed_atom = caf::atom_constant<caf::atom("pyconsume")>;
using discard_atom = caf::atom_constant<caf::atom("pydiscard")>;

// What the receiver and the iterating thread share.
struct channel {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<batch> ready;
  bool discard = false;
  bool done = false;
  run_result result;
  std::optional<job_progress> progress;
};

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
    [=](job_done_atom, const run_result& r) {
      {
        std::lock_guard<std::mutex> lock{ch->mutex};
        ch->done = true;
        ch->result = r;
        ch->progress = r.final;
      }
      ch->changed.notify_all();
      self->quit();
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

// Answers every batch at once: for the outlets that are not read.
caf::behavior drain() {
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
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  registry reg;
  std::optional<job> j;
  caf::actor receiver;
  std::vector<caf::actor> drains;

  ~state() {
    j.reset();
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
      st.drains.push_back(st.sys->spawn(drain));
      jo.outlets[s.name()] = st.drains.back();
    }
  }
  try {
    st.j.emplace(job::start(*st.sys, topo, st.reg, jo));
  } catch (...) {
    release_logger();
    throw;
  }
  release_logger();
}

stream::~stream() {
  close(std::chrono::seconds{10});
}

stream::status stream::next(batch& out, std::chrono::milliseconds timeout) {
  if (ended_ || !state_)
    return status::end;
  auto& st = *state_;
  auto& ch = *st.ch;
  std::unique_lock<std::mutex> lock{ch.mutex};
  for (;;) {
    if (!ch.changed.wait_for(lock, timeout,
                             [&] { return !ch.ready.empty() || ch.done; }))
      return status::waiting;
    if (!ch.ready.empty()) {
      out = std::move(ch.ready.front());
      ch.ready.pop_front();
      caf::anon_send(st.receiver, consumed_atom::value);
      release_logger();
      if (epochs_ > 0 && out.epoch >= static_cast<uint64_t>(epochs_)) {
        // Past the epochs asked for: end the job, drop the rest.
        ch.discard = true;
        ch.ready.clear();
        lock.unlock();
        stop();
        lock.lock();
        continue;
      }
      return status::batch;
    }
    result_ = ch.result;
    ended_ = true;
    return status::end;
  }
}

void stream::stop() {
  if (!state_ || ended_)
    return;
  {
    std::lock_guard<std::mutex> lock{state_->ch->mutex};
    state_->ch->discard = true;
    state_->ch->ready.clear();
  }
  caf::anon_send(state_->receiver, discard_atom::value);
  state_->j->stop();
  release_logger();
}

void stream::close(std::chrono::milliseconds limit) {
  if (!state_)
    return;
  stop();
  auto& j = *state_->j;
  auto r = j.wait_for(limit);
  if (!r) {
    j.abort("the Python iterator was closed and the job did not drain "
            "within the time allowed");
    r = j.wait_for(limit);
  }
  if (r && !ended_) {
    result_ = *r;
    ended_ = true;
  }
  release_logger();
  // The actor system's destructor waits for every actor without a bound
  // (CAF 0.17): give it `limit`, then leave it behind.
  auto done = std::make_shared<std::promise<void>>();
  auto finished = done->get_future();
  std::thread t{[st = std::move(state_), done]() mutable {
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
  if (!ended_) {
    result_.ok = false;
    result_.error = "the job did not end after it was closed";
    ended_ = true;
  }
}

std::optional<job_progress> stream::progress() const {
  if (!state_)
    return result_.final;
  std::lock_guard<std::mutex> lock{state_->ch->mutex};
  return state_->ch->progress;
}

} // namespace af::py
