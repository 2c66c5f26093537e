// What a process moved over TCP, as the kernel counts it: the bytes it sent
// that its peers acknowledged and the bytes it received (TCP_INFO's
// tcpi_bytes_acked and tcpi_bytes_received, Linux 4.2 and later), summed
// over the sockets it has open, optionally only those whose peer is at one
// of a set of ports. Internal, not installed: the coordinator measures what
// crosses its own process (docs/multi-host.md, "Bytes through the
// coordinator").
#pragma once

#include <cstdint>
#include <map>
#include <set>

namespace af {

struct tcp_totals {
  uint64_t sent = 0; // acknowledged by the peer
  uint64_t received = 0;
};

class tcp_meter {
public:
  /// Counts what moves from now on over sockets whose peer port is in
  /// `peer_ports` (every TCP socket when it is empty). A socket open now
  /// counts from what it had moved so far.
  explicit tcp_meter(std::set<uint16_t> peer_ports = {});

  /// The totals since construction: every matching socket open now, and
  /// what the sockets seen at an earlier sample had moved by then (a socket
  /// closed since counts up to that sample). Reads /proc/self/fd and asks
  /// the kernel for each socket; costs some microseconds per socket.
  tcp_totals sample();

private:
  struct socket_seen {
    tcp_totals base; // when first seen (0 for a socket opened since)
    tcp_totals last; // at the last sample
  };
  void scan(bool baseline);

  std::set<uint16_t> ports_;
  std::map<uint64_t, socket_seen> sockets_; // by inode
  tcp_totals retired_; // sockets whose inode went to a new socket
};

} // namespace af
