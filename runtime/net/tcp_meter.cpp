// What a process moved over TCP, as the kernel counts it: the bytes its
// peers acknowledged and the bytes it received (TCP_INFO), summed over its
// open sockets. Declared in runtime/net/tcp_meter.hpp.
#include "actorflow/runtime/net/tcp_meter.hpp"

#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include <arpa/inet.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

namespace af {

namespace {

// The peer's port of socket `fd`, 0 when it has none (not connected, or
// not an IP socket).
uint16_t peer_port(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    return 0;
  if (addr.ss_family == AF_INET)
    return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6)
    return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return 0;
}

} // namespace

tcp_meter::tcp_meter(std::set<uint16_t> peer_ports)
  : ports_(std::move(peer_ports)) {
  scan(true);
}

void tcp_meter::scan(bool baseline) {
  std::error_code ec;
  std::filesystem::directory_iterator it{"/proc/self/fd", ec}, end;
  for (; !ec && it != end; it.increment(ec)) {
    char* stop = nullptr;
    auto name = it->path().filename().string();
    long fd = std::strtol(name.c_str(), &stop, 10);
    if (stop == name.c_str() || *stop != '\0')
      continue;
    struct stat st {};
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode))
      continue;
    tcp_info info{};
    socklen_t len = sizeof(info);
    if (getsockopt(static_cast<int>(fd), IPPROTO_TCP, TCP_INFO, &info, &len)
          != 0
        || len < offsetof(tcp_info, tcpi_bytes_received)
                   + sizeof(info.tcpi_bytes_received))
      continue; // not TCP, or a kernel without the byte counters
    if (!ports_.empty() && !ports_.count(peer_port(static_cast<int>(fd))))
      continue;
    // The fd may have been closed and reused since fstat: count it only
    // if it is still the same socket.
    struct stat again {};
    if (fstat(static_cast<int>(fd), &again) != 0 || again.st_ino != st.st_ino)
      continue;
    tcp_totals now{info.tcpi_bytes_acked, info.tcpi_bytes_received};
    auto ino = static_cast<uint64_t>(st.st_ino);
    auto seen = sockets_.find(ino);
    if (seen == sockets_.end()) {
      socket_seen s;
      if (baseline)
        s.base = now;
      s.last = now;
      sockets_.emplace(ino, s);
      continue;
    }
    auto& s = seen->second;
    if (now.sent < s.last.sent || now.received < s.last.received) {
      // The inode went to a new socket: keep what the old one moved.
      retired_.sent += s.last.sent - s.base.sent;
      retired_.received += s.last.received - s.base.received;
      s.base = tcp_totals{};
    }
    s.last = now;
  }
}

tcp_totals tcp_meter::sample() {
  scan(false);
  tcp_totals t = retired_;
  for (auto& [ino, s] : sockets_) {
    t.sent += s.last.sent - s.base.sent;
    t.received += s.last.received - s.base.received;
  }
  return t;
}

} // namespace af
