// tcp_meter: what the kernel says this process moved over TCP, on a real
// loopback connection within the test.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "actorflow/runtime/net/tcp_meter.hpp"

namespace {

// A connected pair on 127.0.0.1: `client` connected to `server`'s port.
struct loopback {
  int listener = -1;
  int client = -1;
  int server = -1;
  uint16_t port = 0;

  loopback() {
    listener = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(listener >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr))
            == 0);
    REQUIRE(listen(listener, 1) == 0);
    socklen_t len = sizeof(addr);
    REQUIRE(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len)
            == 0);
    port = ntohs(addr.sin_port);
    client = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(client >= 0);
    REQUIRE(connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr))
            == 0);
    server = accept(listener, nullptr, nullptr);
    REQUIRE(server >= 0);
  }

  ~loopback() {
    for (int fd : {listener, client, server})
      if (fd >= 0)
        close(fd);
  }

  // Sends n bytes from client to server, and reads them there.
  void transfer(size_t n) {
    std::vector<char> buf(n, 'x');
    std::thread reader{[&] {
      std::vector<char> in(65536);
      size_t got = 0;
      while (got < n) {
        auto r = read(server, in.data(), in.size());
        if (r <= 0)
          break;
        got += static_cast<size_t>(r);
      }
    }};
    size_t sent = 0;
    while (sent < n) {
      auto w = write(client, buf.data() + sent, n - sent);
      if (w <= 0)
        break;
      sent += static_cast<size_t>(w);
    }
    reader.join();
    REQUIRE(sent == n);
  }
};

// The meter's totals once the peer's acknowledgements have come in (they
// may trail the read by a moment).
af::tcp_totals settle(af::tcp_meter& m, uint64_t sent_at_least) {
  auto t = m.sample();
  for (int i = 0; i < 200 && t.sent < sent_at_least; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
    t = m.sample();
  }
  return t;
}

} // namespace

TEST_CASE("tcp_meter counts a connection's bytes from the kernel") {
  loopback c;
  const size_t n = 3 << 20;
  af::tcp_meter both;                     // every TCP socket
  af::tcp_meter to_port{{c.port}};        // the client's socket only
  af::tcp_meter elsewhere{{uint16_t(1)}}; // no socket has peer port 1
  c.transfer(n);

  auto t = settle(both, n);
  CHECK(t.sent >= n);     // the client's, acknowledged
  CHECK(t.received >= n); // the server's
  CHECK(t.sent < n + 4096);
  CHECK(t.received < n + 4096);

  auto p = settle(to_port, n);
  CHECK(p.sent >= n);
  CHECK(p.received < 4096); // the server's socket is not counted

  auto e = elsewhere.sample();
  CHECK(e.sent == 0);
  CHECK(e.received == 0);
}

TEST_CASE("tcp_meter counts from its construction and keeps closed sockets") {
  loopback c;
  c.transfer(1 << 20);
  af::tcp_meter m{{c.port}};
  CHECK(m.sample().sent < 4096); // what moved before it is not counted
  c.transfer(2 << 20);
  auto t = settle(m, 2 << 20);
  CHECK(t.sent >= (2u << 20));
  CHECK(t.sent < (2u << 20) + 4096);
  close(c.client);
  c.client = -1;
  auto after = m.sample();
  CHECK(after.sent == t.sent); // the closed socket still counts
}
