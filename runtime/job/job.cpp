// job::start, step by step: the checkpoint settings and the checkpoint to
// resume from, the plan the coordinator keeps, the coordinator itself, the
// service actors and the stage replicas (here or on nodes), and the edges
// between the replicas. The coordinator's behaviour is in
// runtime/job/detail/coordinator.cpp (runtime/job/detail/coordinator_state.hpp lists its files).
#include "actorflow/runtime/job/job.hpp"

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>

#include <caf/actor_system.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <google/protobuf/text_format.h>
#include <spdlog/spdlog.h>

#include "actorflow/runtime/core/census.hpp"
#include "actorflow/runtime/job/detail/coordinator_state.hpp"
#include "actorflow/runtime/job/detail/node_connect.hpp"
#include "actorflow/runtime/job/job_part.hpp"
#include "actorflow/runtime/job/node.hpp"
#include "actorflow/runtime/protocol/service.hpp"
#include "actorflow/runtime/protocol/stream.hpp"
#include "actorflow/runtime/stage/credit.hpp"
#include "actorflow/runtime/stage/replica_label.hpp"
#include "actorflow/runtime/state/checkpoint.hpp"

namespace af {

namespace {

using detail::checkpoint_settings;
using detail::job_layout;
using detail::job_plan;
using detail::service_home;

// The topology as text, for nodes (printed once, on first need).
const std::string& topology_text_of(const topology::Topology& spec,
                                    std::string& text) {
  if (text.empty())
    google::protobuf::TextFormat::PrintToString(spec, &text);
  return text;
}

// Progress is reported no more often than stages report their stats.
void limit_progress_interval(const topology::Topology& spec,
                             job_options& opts) {
  auto interval = std::chrono::milliseconds{
    static_cast<int64_t>(1000
                         * (spec.runtime().has_metrics_interval_s()
                              ? spec.runtime().metrics_interval_s()
                              : default_metrics_interval_s))};
  if (interval.count() < 1)
    interval = std::chrono::milliseconds{1};
  if (opts.progress_interval < interval)
    opts.progress_interval = interval;
}

// --- resuming -------------------------------------------------------------

// The checkpoint a job resumes from (none: `from` is empty), its job part,
// and its parts by name. `parts` points into `from`: move it, never copy.
struct resume_point {
  std::optional<checkpoint> from;
  job_part job;
  std::map<std::string, const std::string*> parts;
  std::string where;

  resume_point() = default;
  resume_point(const resume_point&) = delete;
  resume_point& operator=(const resume_point&) = delete;
};

// What the coordinator needs to take checkpoints: no store when the
// topology has no checkpoint section.
std::shared_ptr<checkpoint_settings>
checkpoint_settings_of(const topology::Topology& spec, const registry& reg,
                       const job_options& opts) {
  auto checkpointing = std::make_shared<checkpoint_settings>();
  checkpointing->topology = spec.name();
  checkpointing->timeout = opts.checkpoint_timeout;
  if (!spec.has_checkpoint())
    return checkpointing;
  auto& c = spec.checkpoint();
  checkpointing->store = std::make_unique<checkpoint_store>(
    c.dir(), c.has_keep() ? static_cast<size_t>(c.keep()) : 3);
  checkpointing->every_steps = static_cast<uint64_t>(c.every_steps());
  checkpointing->every_s = c.every_seconds();
  checkpointing->at_end = !c.has_at_end() || c.at_end();
  auto replayed = replayed_stages(spec, reg);
  for (int i = 0; i < spec.stage_size(); ++i)
    if (replayed[static_cast<size_t>(i)])
      checkpointing->replayed.insert(spec.stage(i).name());
  return checkpointing;
}

// The resumed job part must know every replica of the cut of `spec` and no
// other: a job resumes with the stages and replica counts it was
// checkpointed with. Throws std::runtime_error naming the checkpoint.
void check_resumed_replicas(const topology::Topology& spec,
                            const checkpoint_settings& checkpointing,
                            const resume_point& resume) {
  auto& resumed = resume.job;
  auto& resume_where = resume.where;
  std::set<std::string> cut_labels, joined_labels;
  for (int i = 0; i < spec.stage_size(); ++i) {
    auto& s = spec.stage(i);
    if (checkpointing.replayed.count(s.name()))
      continue;
    for (int r = 0; r < replicas_of(s); ++r)
      cut_labels.insert(replica_label(s.name(), r));
    // Replicas that had joined (max_replicas) may be in the cut too.
    for (auto r = replicas_of(s); r < max_replicas_of(s); ++r)
      joined_labels.insert(replica_label(s.name(), static_cast<int>(r)));
  }
  auto known = [&](const std::string& label) {
    if (!cut_labels.count(label) && !joined_labels.count(label))
      throw std::runtime_error(
        resume_where + " holds stage replica '" + label
        + "', which this topology does not have (or replays): a job "
          "resumes with the stages and replica counts it was "
          "checkpointed with");
  };
  for (auto& [label, ended] : resumed.ended) {
    known(label);
    if (!ended && !resume.parts.count(label) && cut_labels.count(label))
      throw std::runtime_error(resume_where + ": the part of '" + label
                               + "' is missing");
  }
  for (auto& label : resumed.lost)
    known(label);
  for (auto& label : cut_labels) {
    if (resumed.lost.count(label))
      spdlog::warn("{} was lost before the checkpoint was taken; it "
                   "starts afresh",
                   label);
    else if (!resumed.ended.count(label))
      throw std::runtime_error(
        resume_where + " does not know stage replica '" + label
        + "': a job resumes with the stages and replica counts it was "
          "checkpointed with");
  }
}

// --resume: the newest complete checkpoint (or that of `step`), checked
// against the topology (none yet: the job starts from the beginning).
// Tells `checkpointing` where the job resumed.
void find_resume_point(const topology::Topology& spec,
                       checkpoint_settings& checkpointing,
                       std::optional<uint64_t> step,
                       resume_point& resume) {
  if (!checkpointing.store)
    throw std::runtime_error("--resume needs checkpoints: the topology has "
                             "no checkpoint { dir: ... } section");
  if (step) {
    std::string why;
    resume.from = checkpointing.store->read(*step, why);
    if (!resume.from)
      throw std::runtime_error("cannot resume from the checkpoint of step "
                               + std::to_string(*step) + ": " + why);
  } else {
    resume.from = checkpointing.store->latest();
  }
  if (!resume.from) {
    spdlog::info("--resume: no complete checkpoint in {} yet; starting "
                 "from the beginning",
                 spec.checkpoint().dir());
    return;
  }
  resume.where = checkpointing.store->path_of(resume.from->step);
  for (auto& p : resume.from->parts)
    resume.parts[p.name] = &p.bytes;
  if (!resume.parts.count("job"))
    throw std::runtime_error(resume.where + ": no job part");
  resume.job = parse_job_part(*resume.parts["job"], resume.where);
  check_resumed_replicas(spec, checkpointing, resume);
  for (auto& [label, ended] : resume.job.ended)
    if (ended)
      checkpointing.resumed_steps[label] = resume.job.steps[label];
  checkpointing.resumed_from = resume.where;
  checkpointing.resumed_step = resume.job.step;
  spdlog::info("resuming from {} (step {})", resume.where, resume.job.step);
}

// --- planning -------------------------------------------------------------

// What the coordinator knows of the topology to handle lost machines (the
// service actors' homes are added as they are spawned).
std::shared_ptr<job_plan> plan_of(const topology::Topology& spec,
                                  const registry& reg,
                                  std::chrono::milliseconds connect_timeout) {
  auto plan = std::make_shared<job_plan>();
  plan->connect_timeout = connect_timeout;
  for (auto& h : spec.host())
    plan->addresses[h.name()] = h.address();
  for (auto& s : spec.stage()) {
    auto* type = reg.find(s.type());
    if (type != nullptr && type->reassignable && replicas_of(s) > 1)
      plan->reassignable.insert(s.name());
    // (max_replicas: replicas that join later count.)
    if (type != nullptr && (type->one_to_one || type->resend_unfinished)
        && max_replicas_of(s) > 1 && s.input_size() > 0) {
      plan->resent.insert(s.name());
      if (type->one_to_one)
        plan->one_to_one.insert(s.name());
    }
    for (auto& in : s.input()) {
      plan->consumers[in.stage()].push_back(s.name());
      plan->producers[s.name()].push_back(in.stage());
    }
  }
  for (auto& s : spec.stage()) {
    if (plan->resent.count(s.name()) && !plan->one_to_one.count(s.name())
        && plan->consumers[s.name()].empty() && s.hosts_size() > 0)
      plan->respawned.insert(s.name());
    // (topology.cpp checks that max_replicas is only on such stages.)
    if (max_replicas_of(s) > replicas_of(s)) {
      plan->elastic[s.name()] = static_cast<uint32_t>(max_replicas_of(s));
      plan->respawned.insert(s.name());
    }
  }
  plan->spec = std::make_shared<const topology::Topology>(spec);
  return plan;
}

// --- connecting and spawning ----------------------------------------------

// What job::start's steps share: the nodes connected so far (host name ->
// its spawner, on first use), and what was spawned so far.
struct launch {
  launch(caf::actor_system& sys, const topology::Topology& spec,
         const registry& reg, std::chrono::milliseconds connect_timeout,
         caf::actor coordinator)
    : sys(sys), spec(spec), reg(reg), connect_timeout(connect_timeout),
      coordinator(std::move(coordinator)) {}

  caf::actor_system& sys;
  const topology::Topology& spec;
  const registry& reg;
  std::chrono::milliseconds connect_timeout;
  caf::actor coordinator;
  caf::scoped_actor self{sys};
  std::map<std::string, node_spawner_actor> spawners;
  std::string topology_text;
  // The coordinator's start message, filled in spawn order.
  job_layout layout;
  std::vector<std::vector<caf::actor>> replicas; // by stage index
  std::vector<std::string> service_of;           // flattened, for remote stages

  const std::string& text() { return topology_text_of(spec, topology_text); }

  node_spawner_actor spawner_for(const std::string& host) {
    if (auto it = spawners.find(host); it != spawners.end())
      return it->second;
    std::string address;
    for (auto& h : spec.host())
      if (h.name() == host)
        address = h.address();
    auto spawner = connect_node(self, host, address, connect_timeout);
    spawners.emplace(host, spawner);
    return spawner;
  }

  // Asks a node to create an actor; the answer is its handle.
  template <class... Ts>
  caf::actor remote(const std::string& host, const std::string& what,
                    Ts... request) {
    auto spawner = spawner_for(host);
    caf::actor handle;
    self->request(spawner, std::chrono::seconds{60}, request...)
      .receive([&](caf::actor& a) { handle = std::move(a); },
               [&](caf::error& err) {
                 throw std::runtime_error(what + " on host '" + host
                                          + "': " + sys.render(err));
               });
    return handle;
  }

  // A job that cannot start leaves nothing behind.
  void kill_spawned() {
    for (auto& h : layout.handles)
      caf::anon_send_exit(h, caf::exit_reason::user_shutdown);
    for (auto& h : layout.services)
      caf::anon_send_exit(h, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(coordinator, caf::exit_reason::user_shutdown);
  }
};

// A resumed service actor gets its part of the checkpoint.
void restore_service(launch& l, const resume_point& resume,
                     const std::string& label, const caf::actor& a) {
  auto it = resume.parts.find(label);
  if (it == resume.parts.end()) {
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    throw std::runtime_error(resume.where + " has no part for " + label);
  }
  std::string failure;
  l.self
    ->request(caf::actor_cast<service_actor>(a), std::chrono::seconds{60},
              service_restore_atom::value, *it->second)
    .receive([](uint64_t) {},
             [&](caf::error& err) { failure = l.sys.render(err); });
  if (!failure.empty())
    throw std::runtime_error("cannot restore from " + resume.where + ": "
                             + failure);
}

// Replicas that had joined the job before the checkpoint (max_replicas)
// are not started again (a node of their stage that answers joins anew):
// the restored shards, which hold them paused at the cut, drop them.
void drop_joined(const launch& l, const resume_point& resume) {
  for (auto& [label, ended] : resume.job.ended) {
    if (ended)
      continue;
    auto stage = label.substr(0, label.rfind('['));
    auto r = static_cast<uint32_t>(
      std::stoul(label.substr(label.rfind('[') + 1)));
    for (auto& s : l.spec.stage())
      if (s.name() == stage && r >= replicas_of(s)) {
        spdlog::info("{} had joined the job before the checkpoint; it is "
                     "not started again (a node of its stage that answers "
                     "joins anew)",
                     label);
        for (auto& service : l.layout.services)
          caf::anon_send(caf::actor_cast<service_actor>(service),
                         replica_lost_atom::value, stage, r);
      }
  }
}

// Services first: stages reach them from their factories.
void spawn_services(launch& l, job_context& context, job_plan& plan,
                    const resume_point& resume) {
  auto& spec = l.spec;
  for (auto& service : l.reg.services()) {
    auto count = service.count(spec);
    auto hosts =
      service.hosts ? service.hosts(spec) : std::vector<std::string>{};
    std::vector<caf::actor> actors;
    for (uint32_t k = 0; k < count; ++k) {
      auto label = replica_label(service.name, k);
      caf::actor a;
      try {
        if (hosts.empty())
          a = service.spawn(l.sys, spec, k);
        else
          a =
            l.remote(hosts[k % hosts.size()], label, spawn_service_atom::value,
                     l.text(), service.name, k, l.coordinator);
      } catch (const std::exception& ex) {
        throw std::runtime_error(label + ": cannot start: " + ex.what());
      }
      actors.push_back(a);
      l.layout.services.push_back(a);
      if (!hosts.empty()) {
        plan.topology_text = l.text();
        plan.by_label[label] =
          service_home{service.name, k, hosts, k % hosts.size()};
      }
      if (resume.from)
        restore_service(l, resume, label, a);
      l.layout.service_labels.push_back(label);
      l.service_of.push_back(service.name);
    }
    if (count > 0)
      context.services[service.name] = std::move(actors);
  }
}

// Spawns every replica, stage by stage; `replicas` gets (label, handle) of
// each.
void spawn_stages(launch& l, std::shared_ptr<const job_context> context,
                  std::vector<std::pair<std::string, caf::actor>>& replicas) {
  auto& spec = l.spec;
  l.replicas.resize(static_cast<size_t>(spec.stage_size()));
  for (int i = 0; i < spec.stage_size(); ++i) {
    auto& s = spec.stage(i);
    auto* type = l.reg.find(s.type());
    auto n = static_cast<uint32_t>(replicas_of(s));
    for (uint32_t r = 0; r < n; ++r) {
      auto label = replica_label(s.name(), r);
      caf::actor handle;
      if (s.hosts_size() == 0)
        handle =
          spawn_replica(l.sys, l.reg, spec, i, r, context, l.coordinator);
      else
        handle = l.remote(s.hosts(static_cast<int>(r % s.hosts_size())),
                          "stage " + label, spawn_stage_atom::value, l.text(),
                          static_cast<uint32_t>(i), r, l.coordinator,
                          l.service_of, l.layout.services);
      l.layout.labels.push_back(label);
      l.layout.stages.push_back(s.name());
      if (r == 0 && type->replicas_may_fail)
        l.layout.may_fail.push_back(s.name());
      l.layout.handles.push_back(handle);
      l.replicas[i].push_back(handle);
      replicas.emplace_back(label, handle);
    }
  }
}

// --- wiring ---------------------------------------------------------------

// Every producer replica to every consumer replica, by consumer stage and
// replica.
std::vector<std::vector<wiring>> edges_of(const launch& l,
                                          const job_plan& plan) {
  auto& spec = l.spec;
  auto& replicas = l.replicas;
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
        auto pname = replica_label(in.stage(), pr);
        for (size_t cr = 0; cr < replicas[i].size(); ++cr) {
          auto cname = replica_label(s.name(), cr);
          per_replica[i][cr].upstreams.push_back(upstream_edge{
            replicas[p][pr], pname, static_cast<uint64_t>(window_of(in)),
            static_cast<uint64_t>(in.byte_budget()),
            plan.reassignable.count(in.stage()) > 0
              || plan.resent.count(in.stage()) > 0,
            plan.resent.count(s.name()) > 0});
          per_replica[p][pr].downstreams.push_back(downstream_edge{
            replicas[i][cr], cname, plan.resent.count(s.name()) > 0});
        }
      }
    }
  }
  return per_replica;
}

// Wires every replica; a resumed job's replicas of the cut get their state
// first (the same sender, so it arrives before the wiring).
void wire(const launch& l, const job_plan& plan,
          const checkpoint_settings& checkpointing,
          const resume_point& resume) {
  auto& spec = l.spec;
  auto per_replica = edges_of(l, plan);
  for (int i = 0; i < spec.stage_size(); ++i)
    for (size_t r = 0; r < l.replicas[i].size(); ++r) {
      auto replica = caf::actor_cast<stage_actor>(l.replicas[i][r]);
      if (resume.from && !checkpointing.replayed.count(spec.stage(i).name())) {
        auto label = replica_label(spec.stage(i).name(), r);
        auto it = resume.job.ended.find(label);
        bool ended = it != resume.job.ended.end() && it->second;
        std::string state;
        if (it != resume.job.ended.end() && !ended)
          state = *resume.parts.at(label);
        caf::anon_send(replica, restore_atom::value, std::move(state), ended);
      }
      caf::anon_send(replica, wire_atom::value, per_replica[i][r]);
    }
}

// Direct traffic between nodes (runtime/net/data_plane.hpp): every node gets a
// secret for this job and where the others' data ports are, and must reach
// each of them. With TLS (--tls-*) the data plane is TLS too
// (data_plane::start).
void connect_data_plane(launch& l) {
  if (l.spawners.empty())
    return;
  auto secret = make_job_secret();
  std::vector<data_route> routes;
  for (auto& entry : l.spawners) {
    // (Not a structured binding: the lambda below names the host.)
    const auto& host = entry.first;
    const auto& spawner = entry.second;
    uint16_t port = 0;
    l.self
      ->request(spawner, std::chrono::seconds{60}, data_plane_atom::value,
                secret)
      .receive([&](uint16_t p) { port = p; },
               [&](caf::error& err) {
                 throw std::runtime_error(
                   "host '" + host + "': no data plane: " + l.sys.render(err));
               });
    if (port == 0)
      continue;
    data_route r;
    r.node = spawner.node();
    r.name = host;
    for (auto& h : l.spec.host())
      if (h.name() == host)
        if (auto addr = parse_address(h.address()))
          r.host = addr->host;
    r.port = port;
    r.secret = secret;
    routes.push_back(std::move(r));
  }
  if (routes.empty())
    return;
  data_plane::start(l.sys, data_plane::options{})->add_routes(routes);
  for (auto& [host, spawner] : l.spawners) {
    std::vector<std::string> problems;
    l.self
      ->request(spawner, std::chrono::seconds{60}, data_routes_atom::value,
                routes)
      .receive([&](std::vector<std::string>& p) { problems = std::move(p); },
               [&](caf::error& err) {
                 problems.push_back("(no answer: " + l.sys.render(err) + ")");
               });
    if (!problems.empty()) {
      // "w3: cannot connect to ...": the node names the host it missed.
      auto& p = problems.front();
      auto colon = p.find(": ");
      auto other = colon == std::string::npos ? p : p.substr(0, colon);
      auto why = colon == std::string::npos ? "" : p.substr(colon + 2);
      throw std::runtime_error(
        "host '" + host + "' cannot reach host '" + other + "' directly (" + why
        + "); every node must reach the others' data ports (docs/"
          "multi-host.md, \"The data plane\")");
    }
  }
  spdlog::info("data plane: {} nodes connected directly{}", routes.size(),
               l.sys.has_openssl_manager() ? " over TLS" : "");
}

} // namespace

job job::start(caf::actor_system& sys, const loaded_topology& topo,
               const registry& reg, job_options opts) {
  job result;
  auto slot = std::make_shared<detail::result_slot>();
  slot->listener = opts.listener;
  // For the context below (opts moves into the coordinator first).
  auto outlets = opts.outlets;
  result.result_ = slot->promise.get_future().share();
  auto& spec = topo.spec;
  limit_progress_interval(spec, opts);
  auto connect_timeout = opts.connect_timeout;

  auto checkpointing = checkpoint_settings_of(spec, reg, opts);
  resume_point resume;
  if (opts.resume || opts.resume_step) {
    find_resume_point(spec, *checkpointing, opts.resume_step, resume);
    if (resume.from)
      result.resumed_step_ = resume.job.step;
  }
  auto plan = plan_of(spec, reg, connect_timeout);
  auto coordinator = sys.spawn(detail::coordinator_main, std::move(opts), slot,
                               checkpointing, plan);
  // job::coordinator() and job_context::coordinator are untyped (public).
  result.coordinator_ = caf::actor_cast<caf::actor>(coordinator);
  census_add(result.coordinator_, "coordinator");

  launch l{sys, spec, reg, connect_timeout, result.coordinator_};
  auto context = std::make_shared<job_context>();
  context->system = &sys;
  context->topology = std::make_shared<const topology::Topology>(spec);
  context->coordinator = result.coordinator_;
  context->outlets = std::move(outlets);
  if (!plan->respawned.empty() || !plan->elastic.empty())
    plan->topology_text = l.text();
  try {
    spawn_services(l, *context, *plan, resume);
    drop_joined(l, resume);
    spawn_stages(l, context, result.replicas_);
    connect_data_plane(l);
  } catch (const std::exception&) {
    l.kill_spawned();
    throw;
  }
  auto& layout = l.layout;
  caf::anon_send(coordinator, start_atom::value, layout.handles, layout.labels,
                 layout.stages, layout.may_fail, layout.services,
                 layout.service_labels);
  wire(l, *plan, *checkpointing, resume);
  return result;
}

void job::stop() const {
  caf::anon_send(caf::actor_cast<coordinator_actor>(coordinator_),
                 stop_atom::value);
}

void job::abort(const std::string& reason) const {
  caf::anon_send(caf::actor_cast<coordinator_actor>(coordinator_),
                 abort_atom::value, reason);
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
