#include "runtime/job.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/sec.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>

#include <google/protobuf/text_format.h>
#include <spdlog/spdlog.h>

#include "runtime/credit.hpp"
#include "runtime/node.hpp"
#include "runtime/stream.hpp"

namespace af {

namespace {

// The topology as text, for nodes (printed once, on first need).
const std::string& topology_text_of(const topology::Topology& spec,
                                    std::string& text) {
  if (text.empty())
    google::protobuf::TextFormat::PrintToString(spec, &text);
  return text;
}

using start_atom = caf::atom_constant<caf::atom("af_start")>;
using abort_atom = caf::atom_constant<caf::atom("af_abort")>;
using progress_atom = caf::atom_constant<caf::atom("af_progr")>;

using clock_type = std::chrono::steady_clock;

struct replica_entry {
  caf::actor handle;
  std::string label;
  std::string stage;
  bool may_fail = false; // stage_type::replicas_may_fail
  bool done = false;
  bool down = false;
  bool failed = false;
};

// What the coordinator is told at start: every replica and the service
// actors, in spawn order.
struct job_layout {
  std::vector<caf::actor> handles;
  std::vector<std::string> labels;
  std::vector<std::string> stages;
  std::vector<std::string> may_fail; // stage names
  std::vector<caf::actor> services;
  std::vector<std::string> service_labels;
};

// The job's result, delivered exactly once: by the coordinator when the job
// ends, or when the coordinator itself is killed (system shutdown).
struct result_slot {
  std::mutex mtx;
  bool set = false;
  std::promise<run_result> promise;

  void deliver(run_result r) {
    std::lock_guard<std::mutex> guard{mtx};
    if (set)
      return;
    set = true;
    promise.set_value(std::move(r));
  }
};

struct coordinator_state {
  job_options opts;
  std::shared_ptr<result_slot> result;
  std::vector<replica_entry> replicas;
  std::vector<std::pair<std::string, caf::actor>> services;
  std::vector<std::string> tolerated;
  bool started = false;
  bool stopped = false;
  std::string error;
  std::map<std::string, stage_stats> stats;
  clock_type::time_point begin = clock_type::now();
};

using coordinator_actor = caf::stateful_actor<coordinator_state>;

job_progress progress_of(coordinator_state& st) {
  job_progress p;
  p.elapsed_s =
    std::chrono::duration<double>(clock_type::now() - st.begin).count();
  // Stages in topology order (the order they were spawned in).
  for (auto& r : st.replicas) {
    auto it = st.stats.find(r.label);
    if (it == st.stats.end())
      continue;
    auto& s = it->second;
    if (s.is_sink) {
      p.items += s.items_in;
      p.records += s.records_in;
      p.bytes += s.bytes_in;
    }
    p.stages.push_back(s);
  }
  return p;
}

void kill_all(coordinator_actor* self) {
  for (auto& r : self->state.replicas)
    if (!r.down)
      self->send_exit(r.handle, caf::exit_reason::user_shutdown);
}

// A failed replica of a stage that allows it is tolerated while another
// replica of the stage is running or ended normally.
bool tolerate(coordinator_actor* self, replica_entry& failed,
              const std::string& cause) {
  auto& st = self->state;
  if (failed.failed)
    return true; // already counted (stream_error, then down)
  if (!failed.may_fail)
    return false;
  for (auto& r : st.replicas)
    if (&r != &failed && r.stage == failed.stage && !r.failed
        && (!r.down || r.done)) {
      failed.failed = true;
      st.tolerated.push_back(failed.label + ": " + cause);
      spdlog::warn("{} failed ({}); the job goes on without it", failed.label,
                   cause);
      auto open = failed.label.rfind('[');
      auto replica = static_cast<uint32_t>(
        std::strtoul(failed.label.c_str() + open + 1, nullptr, 10));
      for (auto& [label, handle] : st.services)
        self->send(handle, replica_lost_atom::value, failed.stage, replica);
      return true;
    }
  return false;
}

void record_error(coordinator_actor* self, std::string message) {
  auto& st = self->state;
  if (!st.error.empty())
    return;
  st.error = std::move(message);
  spdlog::debug("job failed: {}", st.error);
  kill_all(self);
}

void maybe_complete(coordinator_actor* self) {
  auto& st = self->state;
  if (!st.started)
    return;
  for (auto& r : st.replicas)
    if (!r.down)
      return;
  // Services live as long as some stage does.
  for (auto& [label, handle] : st.services)
    self->send_exit(handle, caf::exit_reason::user_shutdown);
  run_result result;
  result.ok = st.error.empty();
  result.stopped = st.stopped;
  result.error = st.error;
  result.tolerated_failures = st.tolerated;
  result.final = progress_of(st);
  st.result->deliver(std::move(result));
  self->quit();
}

caf::behavior coordinator_main(coordinator_actor* self, job_options opts,
                               std::shared_ptr<result_slot> result) {
  self->state.opts = std::move(opts);
  self->state.result = result;
  self->attach_functor([result](const caf::error& reason) {
    // Only reached with a result still missing if the coordinator was
    // killed: waiters must not hang.
    run_result r;
    r.error = "the job's coordinator exited: "
              + (reason ? caf::to_string(reason) : std::string{"normal"});
    result->deliver(std::move(r));
  });
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& st = self->state;
    for (auto& r : st.replicas)
      if (!r.down && r.handle.address() == dm.source) {
        r.down = true;
        if (!r.done && st.error.empty()) {
          auto reason = dm.reason ? caf::to_string(dm.reason)
                                  : std::string{"exited before its end of "
                                                "stream"};
          if (!tolerate(self, r, reason))
            record_error(self, "stage " + r.label + " went down: " + reason);
        }
      }
    for (auto& [label, handle] : st.services)
      if (handle.address() == dm.source && st.error.empty()) {
        bool ending = std::all_of(st.replicas.begin(), st.replicas.end(),
                                  [](auto& r) { return r.down; });
        if (!ending)
          record_error(self, label + " went down: "
                               + (dm.reason ? caf::to_string(dm.reason)
                                            : std::string{"exited"}));
      }
    maybe_complete(self);
  });
  return {
    [=](start_atom, const std::vector<caf::actor>& handles,
        const std::vector<std::string>& labels,
        const std::vector<std::string>& stages,
        const std::vector<std::string>& may_fail,
        const std::vector<caf::actor>& services,
        const std::vector<std::string>& service_labels) {
      auto& st = self->state;
      job_layout l{handles, labels, stages, may_fail, services,
                   service_labels};
      for (size_t i = 0; i < l.handles.size(); ++i) {
        replica_entry r;
        r.handle = l.handles[i];
        r.label = l.labels[i];
        r.stage = l.stages[i];
        r.may_fail = std::find(l.may_fail.begin(), l.may_fail.end(), r.stage)
                     != l.may_fail.end();
        st.replicas.push_back(std::move(r));
        self->monitor(l.handles[i]);
      }
      for (size_t i = 0; i < l.services.size(); ++i) {
        st.services.emplace_back(l.service_labels[i], l.services[i]);
        self->monitor(l.services[i]);
      }
      st.started = true;
      st.begin = clock_type::now();
      if (st.opts.on_progress)
        self->delayed_send(self, st.opts.progress_interval,
                           progress_atom::value);
    },
    [=](stats_atom, stage_stats& s) {
      auto label = s.stage;
      self->state.stats[label] = std::move(s);
    },
    [=](done_atom, stage_stats& s) {
      auto& st = self->state;
      for (auto& r : st.replicas)
        if (r.label == s.stage)
          r.done = true;
      auto label = s.stage;
      st.stats[label] = std::move(s);
    },
    [=](const stream_error& err) {
      for (auto& r : self->state.replicas)
        if (r.label == err.stage && !err.bad_input
            && tolerate(self, r, err.cause))
          return;
      record_error(self, "stage " + err.stage + " failed: " + err.cause);
    },
    [=](stop_atom) {
      auto& st = self->state;
      st.stopped = true;
      // Every replica: sources stop reading, stages that produce after
      // their input ended (cache replays) stop too.
      for (auto& r : st.replicas)
        if (!r.down)
          self->send(r.handle, stop_atom::value);
    },
    [=](abort_atom, const std::string& reason) { record_error(self, reason); },
    [=](progress_atom) {
      auto& st = self->state;
      st.opts.on_progress(progress_of(st));
      self->delayed_send(self, st.opts.progress_interval, progress_atom::value);
    },
  };
}

} // namespace

job job::start(caf::actor_system& sys, const loaded_topology& topo,
               const registry& reg, job_options opts) {
  job result;
  auto slot = std::make_shared<result_slot>();
  result.result_ = slot->promise.get_future().share();
  auto& spec = topo.spec;
  auto interval = std::chrono::milliseconds{
    static_cast<int64_t>(1000
                         * (spec.runtime().has_metrics_interval_s()
                              ? spec.runtime().metrics_interval_s()
                              : default_metrics_interval_s))};
  if (interval.count() < 1)
    interval = std::chrono::milliseconds{1};
  // Progress is reported no more often than stages report their stats.
  if (opts.progress_interval < interval)
    opts.progress_interval = interval;
  auto connect_timeout = opts.connect_timeout;
  result.coordinator_ = sys.spawn(coordinator_main, std::move(opts), slot);

  std::vector<std::vector<caf::actor>> replicas(spec.stage_size());
  std::vector<caf::actor> handles;
  std::vector<std::string> labels, stages, may_fail, service_labels;
  std::vector<caf::actor> service_handles;
  auto kill_spawned = [&] {
    for (auto& h : handles)
      caf::anon_send_exit(h, caf::exit_reason::user_shutdown);
    for (auto& h : service_handles)
      caf::anon_send_exit(h, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(result.coordinator_, caf::exit_reason::user_shutdown);
  };

  // Nodes, connected on first use: host name -> its spawner.
  std::map<std::string, caf::actor> spawners;
  std::string topology_text;
  caf::scoped_actor self{sys};
  auto spawner_for = [&](const std::string& host) -> caf::actor {
    if (auto it = spawners.find(host); it != spawners.end())
      return it->second;
    std::string address;
    for (auto& h : spec.host())
      if (h.name() == host)
        address = h.address();
    auto where = "host '" + host + "' (" + address + ")";
    auto parsed = parse_address(address);
    if (!parsed)
      throw std::runtime_error(where + ": not a HOST:PORT address");
    if (!sys.has_middleman())
      throw std::runtime_error(where + ": this actor system has no network "
                                       "(load caf::io::middleman)");
    // What remote_actor does, with a time limit: through the OpenSSL
    // module's middleman actor when the system has one (TLS with mutual
    // certificate checks), else the plain one.
    bool tls = sys.has_openssl_manager();
    auto mm = tls ? sys.openssl_manager().actor_handle()
                  : sys.middleman().actor_handle();
    caf::actor spawner;
    caf::error failure;
    self
      ->request(mm, connect_timeout, caf::connect_atom::value, parsed->host,
                parsed->port)
      .receive(
        [&](caf::node_id&, caf::strong_actor_ptr& ptr, std::set<std::string>&) {
          if (ptr)
            spawner = caf::actor_cast<caf::actor>(std::move(ptr));
          else
            failure = caf::sec::no_actor_published_at_port;
        },
        [&](caf::error& err) { failure = std::move(err); });
    if (failure) {
      auto why = sys.render(failure);
      // No TCP connection at all: CAF names the failed ip_connect.
      bool no_tcp = failure == caf::sec::cannot_connect_to_node
                    && !failure.context().empty();
      // A peer that accepts and then says nothing: CAF's own handshake
      // timeout (middleman.connection-timeout), else ours.
      if (failure == caf::sec::request_timeout
          || failure == caf::sec::connection_timeout)
        throw std::runtime_error(
          where + " accepted the connection but did not complete the "
          + (tls ? "TLS" : "CAF") + " handshake: "
          + (failure == caf::sec::request_timeout
               ? "no answer within " + std::to_string(connect_timeout.count())
                   + " ms"
               : why)
          + " (is it a running `actorflow node`"
          + (tls ? " with --tls-cert/--tls-key/--tls-ca?)" : "?)"));
      if (tls && !no_tcp)
        throw std::runtime_error(
          where + " refused the TLS connection: " + why
          + " (the node must run with --tls-cert/--tls-key/--tls-ca, and "
            "each side's certificate must be signed by a CA in the other "
            "side's --tls-ca)");
      if (!tls && failure == caf::sec::disconnect_during_handshake)
        throw std::runtime_error(
          where + " closed the connection during the handshake: " + why
          + " (does the node require TLS? then run with "
            "--tls-cert/--tls-key/--tls-ca too)");
      throw std::runtime_error(where + " is unreachable: " + why
                               + " (is `actorflow node --listen " + address
                               + "` running there?)");
    }
    spawners.emplace(host, spawner);
    return spawner;
  };
  // Asks a node to create an actor; the answer is its handle.
  auto remote = [&](const std::string& host, const std::string& what,
                    auto... request) {
    auto spawner = spawner_for(host);
    caf::actor handle;
    self->request(spawner, std::chrono::seconds{60}, request...)
      .receive([&](caf::actor& a) { handle = std::move(a); },
               [&](caf::error& err) {
                 throw std::runtime_error(what + " on host '" + host
                                          + "': " + sys.render(err));
               });
    return handle;
  };

  // Services first: stages reach them from their factories.
  auto context = std::make_shared<job_context>();
  context->system = &sys;
  context->topology = std::make_shared<const topology::Topology>(spec);
  std::vector<std::string> service_of; // flattened, for remote stages
  try {
    for (auto& service : reg.services()) {
      auto count = service.count(spec);
      auto hosts = service.hosts ? service.hosts(spec)
                                 : std::vector<std::string>{};
      std::vector<caf::actor> actors;
      for (uint32_t k = 0; k < count; ++k) {
        auto label = service.name + "[" + std::to_string(k) + "]";
        caf::actor a;
        try {
          if (hosts.empty())
            a = service.spawn(sys, spec, k);
          else
            a = remote(hosts[k % hosts.size()], label, spawn_service_atom::value,
                       topology_text_of(spec, topology_text), service.name, k,
                       result.coordinator_);
        } catch (const std::exception& ex) {
          throw std::runtime_error(label + ": cannot start: " + ex.what());
        }
        actors.push_back(a);
        service_handles.push_back(a);
        service_labels.push_back(label);
        service_of.push_back(service.name);
      }
      if (count > 0)
        context->services[service.name] = std::move(actors);
    }

    // Spawn every replica, stage by stage.
    for (int i = 0; i < spec.stage_size(); ++i) {
      auto& s = spec.stage(i);
      auto* type = reg.find(s.type());
      auto n = static_cast<uint32_t>(replicas_of(s));
      for (uint32_t r = 0; r < n; ++r) {
        auto label = s.name() + "[" + std::to_string(r) + "]";
        caf::actor handle;
        if (s.hosts_size() == 0)
          handle = spawn_replica(sys, reg, spec, i, r, context,
                                 result.coordinator_);
        else
          handle = remote(s.hosts(static_cast<int>(r % s.hosts_size())),
                          "stage " + label, spawn_stage_atom::value,
                          topology_text_of(spec, topology_text),
                          static_cast<uint32_t>(i), r, result.coordinator_,
                          service_of, service_handles);
        labels.push_back(label);
        stages.push_back(s.name());
        if (r == 0 && type->replicas_may_fail)
          may_fail.push_back(s.name());
        handles.push_back(handle);
        replicas[i].push_back(handle);
        result.replicas_.emplace_back(label, handle);
      }
    }
  } catch (const std::exception&) {
    kill_spawned();
    throw;
  }
  caf::anon_send(result.coordinator_, start_atom::value, handles, labels,
                 stages, may_fail, service_handles, service_labels);

  // Wire the edges: every producer replica to every consumer replica.
  std::map<std::string, int> index;
  for (int i = 0; i < spec.stage_size(); ++i)
    index[spec.stage(i).name()] = i;
  std::vector<std::vector<wiring>> per_replica(spec.stage_size());
  for (int i = 0; i < spec.stage_size(); ++i)
    per_replica[i].resize(replicas[i].size());
  for (int i = 0; i < spec.stage_size(); ++i) {
    auto& s = spec.stage(i);
    for (auto& in : s.input()) {
      int p = index.at(in.stage());
      for (size_t pr = 0; pr < replicas[p].size(); ++pr) {
        auto pname = in.stage() + "[" + std::to_string(pr) + "]";
        for (size_t cr = 0; cr < replicas[i].size(); ++cr) {
          auto cname = s.name() + "[" + std::to_string(cr) + "]";
          per_replica[i][cr].upstreams.push_back(upstream_edge{
            replicas[p][pr], pname, static_cast<uint64_t>(window_of(in)),
            static_cast<uint64_t>(in.byte_budget())});
          per_replica[p][pr].downstreams.push_back(
            downstream_edge{replicas[i][cr], cname});
        }
      }
    }
  }
  for (int i = 0; i < spec.stage_size(); ++i)
    for (size_t r = 0; r < replicas[i].size(); ++r)
      caf::anon_send(replicas[i][r], wire_atom::value, per_replica[i][r]);
  return result;
}

void job::stop() const {
  caf::anon_send(coordinator_, stop_atom::value);
}

void job::abort(const std::string& reason) const {
  caf::anon_send(coordinator_, abort_atom::value, reason);
}

run_result job::wait() {
  return result_.get();
}

std::optional<run_result> job::wait_for(std::chrono::milliseconds timeout) {
  if (result_.wait_for(timeout) != std::future_status::ready)
    return std::nullopt;
  return result_.get();
}

} // namespace af
