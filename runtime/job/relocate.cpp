// Placing a job again after one of its nodes was lost
// (run_result::recoverable): which of its hosts answer now. Declared in
// runtime/job/relocate.hpp.
#include "actorflow/runtime/job/relocate.hpp"

#include <cerrno>
#include <cstring>
#include <map>
#include <stdexcept>

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include "actorflow/runtime/job/detail/node_connect.hpp"
#include "actorflow/runtime/job/node.hpp"
#include "actorflow/runtime/stage/replica_label.hpp"
#include "actorflow/runtime/topology/topology.hpp"

namespace af {

std::string tcp_probe(const std::string& address,
                      std::chrono::milliseconds timeout) {
  auto parsed = parse_address(address);
  if (!parsed)
    return "not a HOST:PORT address";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  auto port = std::to_string(parsed->port);
  if (int rc = ::getaddrinfo(parsed->host.c_str(), port.c_str(), &hints, &found);
      rc != 0)
    return std::string{"cannot resolve it: "} + ::gai_strerror(rc);
  std::string why = "no address";
  for (auto* a = found; a != nullptr; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                      a->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      ::close(fd);
      why.clear();
      break;
    }
    if (errno != EINPROGRESS) {
      why = std::strerror(errno);
      ::close(fd);
      continue;
    }
    pollfd p{fd, POLLOUT, 0};
    int n = ::poll(&p, 1, static_cast<int>(timeout.count()));
    int err = 0;
    socklen_t len = sizeof err;
    if (n == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0
        && err == 0) {
      ::close(fd);
      why.clear();
      break;
    }
    why = n == 0 ? "no TCP connection within "
                     + std::to_string(timeout.count()) + " ms"
                 : std::strerror(err != 0 ? err : errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return why;
}

namespace {

// Leaves the hosts in `down` out of `hosts`; false when none is left.
template <class Repeated>
bool drop_down(Repeated& hosts, const std::set<std::string>& down) {
  Repeated kept;
  for (auto& h : hosts)
    if (!down.count(h))
      *kept.Add() = h;
  if (kept.empty())
    return hosts.empty();
  hosts.Swap(&kept);
  return true;
}

template <class Repeated>
std::string listed(const Repeated& hosts) {
  std::string out;
  for (auto& h : hosts)
    out += (out.empty() ? "" : ", ") + h;
  return out;
}

// Label -> host of every placed stage replica and service actor.
std::map<std::string, std::string> homes(const topology::Topology& spec,
                                         const registry& reg) {
  std::map<std::string, std::string> out;
  for (auto& s : spec.stage()) {
    if (s.hosts_size() == 0)
      continue;
    auto n = static_cast<uint32_t>(replicas_of(s));
    for (uint32_t r = 0; r < n; ++r)
      out[replica_label(s.name(), r)] =
        s.hosts(static_cast<int>(r % static_cast<uint32_t>(s.hosts_size())));
  }
  for (auto& service : reg.services()) {
    auto hosts =
      service.hosts ? service.hosts(spec) : std::vector<std::string>{};
    if (hosts.empty())
      continue;
    auto count = service.count(spec);
    for (uint32_t k = 0; k < count; ++k)
      out[replica_label(service.name, k)] = hosts[k % hosts.size()];
  }
  return out;
}

} // namespace

std::vector<std::string> placement_hosts(const topology::Topology& spec) {
  std::set<std::string> used;
  for (auto& s : spec.stage())
    used.insert(s.hosts().begin(), s.hosts().end());
  auto& ps = spec.training().ps();
  used.insert(ps.hosts().begin(), ps.hosts().end());
  std::vector<std::string> out;
  for (auto& h : spec.host())
    if (used.count(h.name()))
      out.push_back(h.name());
  return out;
}

std::vector<std::pair<std::string, std::string>>
unreachable_hosts(caf::actor_system& sys, const topology::Topology& spec,
                  std::chrono::milliseconds timeout) {
  std::map<std::string, std::string> address;
  for (auto& h : spec.host())
    address[h.name()] = h.address();
  std::vector<std::pair<std::string, std::string>> out;
  caf::scoped_actor self{sys};
  for (auto& host : placement_hosts(spec)) {
    if (auto why = tcp_probe(address[host], timeout); !why.empty()) {
      out.emplace_back(host, "host '" + host + "' (" + address[host]
                               + "): " + why);
      continue;
    }
    node_spawner_actor spawner;
    try {
      spawner = connect_node(self, host, address[host], timeout);
    } catch (const std::exception& ex) {
      out.emplace_back(host, ex.what());
      continue;
    }
    // A connection CAF still holds to a node that froze or was cut off
    // answers connect_node at once: the node itself must answer.
    self->request(spawner, timeout, node_info_atom::value)
      .receive([](std::string&) {},
               [&](caf::error& err) {
                 out.emplace_back(host, "host '" + host + "' ("
                                          + address[host]
                                          + ") did not answer within "
                                          + std::to_string(timeout.count())
                                          + " ms: " + sys.render(err));
               });
  }
  return out;
}

std::optional<topology::Topology>
place_without(const topology::Topology& spec, const std::set<std::string>& down,
              std::string& why) {
  auto out = spec;
  for (auto& s : *out.mutable_stage()) {
    auto before = listed(s.hosts());
    if (!drop_down(*s.mutable_hosts(), down)) {
      why = "stage '" + s.name() + "': every host of it is down (" + before
            + ")";
      return std::nullopt;
    }
  }
  if (out.has_training()) {
    auto& ps = *out.mutable_training()->mutable_ps();
    auto before = listed(ps.hosts());
    if (!drop_down(*ps.mutable_hosts(), down)) {
      why = "training.ps: every host of it is down (" + before + ")";
      return std::nullopt;
    }
  }
  return out;
}

std::vector<std::string> moved_replicas(const topology::Topology& before,
                                        const topology::Topology& after,
                                        const registry& reg) {
  auto was = homes(before, reg);
  std::vector<std::string> out;
  for (auto& [label, host] : homes(after, reg))
    if (auto it = was.find(label); it != was.end() && it->second != host)
      out.push_back(label + " from host '" + it->second + "' to '" + host
                    + "'");
  return out;
}

} // namespace af
