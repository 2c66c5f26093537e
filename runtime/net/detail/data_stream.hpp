// Internal to the data plane (runtime/net/data_plane.hpp), not installed: the
// byte stream under a data connection. A socket (TCP between machines, a
// Unix socket between processes that share a network namespace), or TLS on
// either when the process runs with --tls-*. The connection reads with one
// thread and writes from the sending threads; a stream allows exactly that
// (one reader and one writer at a time, each on its own thread).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <sys/socket.h>
#include <sys/uio.h>

namespace af::detail {

std::string errno_text(int e);
void set_timeout(int fd, int option, std::chrono::milliseconds t);
// TCP only. Small frames go out at once, and a peer that stops
// acknowledging (its machine froze, the link was cut) fails the connection
// within about ten seconds, writing or idle, instead of never.
void tune_tcp(int fd);
// Unix sockets only. A sender may have 4 MiB in flight (net.core.wmem_max
// permitting) instead of the default ~200 KiB, so a tensor of a few MiB
// goes in a few wake-ups of the reader, not dozens.
void tune_unix(int fd);
// "HOST:PORT" of a TCP peer; "unix:pid N" of a Unix one.
std::string peer_address(int fd, const sockaddr_storage& sa);

// How long a write may wait for the peer to take bytes before the
// connection counts as broken (a TCP socket's SO_SNDTIMEO).
inline constexpr std::chrono::seconds write_timeout{10};

// I/O on a connected socket, which its owner closes after the stream is
// gone.
class stream {
public:
  explicit stream(int fd) : fd_(fd) {}
  virtual ~stream() = default;
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;

  int fd() const { return fd_; }

  // "" once all of [p, p + n) was read; else why not. `eof_ok`: an end of
  // stream before the first byte is a clean close ("closed").
  virtual std::string read_exact(void* p, size_t n, bool eof_ok = false) = 0;
  // "" once every byte of `iov` was written; else why not.
  virtual std::string write_all(std::vector<iovec> iov) = 0;
  // Unix sockets only (plain): writes `iov` with the file descriptor `fd`
  // attached (SCM_RIGHTS); "" or why not.
  virtual std::string write_with_fd(std::vector<iovec> iov, int fd) {
    (void) iov;
    (void) fd;
    return "no file descriptors on " + kind();
  }
  // The file descriptor that came with the bytes read since the last call
  // (the first, if several came: the others are closed), now the
  // caller's; -1 when none came.
  virtual int take_fd() { return -1; }
  // How long a read may wait for bytes; 0: as long as it takes.
  virtual void set_read_timeout(std::chrono::milliseconds t) = 0;
  // "TCP", "Unix socket", "TLS over TCP", ...: for log lines.
  virtual std::string kind() const = 0;

  // Wakes a blocked reader and writer; both fail from now on.
  void shut();

protected:
  int fd_;
};

// A stream on the socket `fd` (blocking), TCP or Unix.
std::unique_ptr<stream> plain_stream(int fd, bool unix_socket);

// TLS with the files CAF's OpenSSL module was given: each side presents
// its certificate and accepts a peer only if a CA in the CA file signed the
// peer's (the check CAF's module makes; host names are not checked).
class tls_context {
public:
  virtual ~tls_context() = default;
  // Throws std::runtime_error naming the file that does not load.
  static std::shared_ptr<tls_context>
  make(const std::string& cert, const std::string& key, const std::string& ca);
  // Makes the TLS handshake on the connected socket `fd`, as the client
  // (`dialed`) or the server, within `timeout`. The stream (`fd` is
  // non-blocking from now on), or nullptr and `why`.
  virtual std::unique_ptr<stream> wrap(int fd, bool unix_socket, bool dialed,
                                       std::chrono::milliseconds timeout,
                                       std::string& why) = 0;
};

} // namespace af::detail
