// The byte streams under data connections (runtime/net/detail/data_stream.hpp):
// plain sockets, and TLS on them.
#include "actorflow/runtime/net/detail/data_stream.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

namespace af::detail {

std::string errno_text(int e) {
  return std::strerror(e);
}

void set_timeout(int fd, int option, std::chrono::milliseconds t) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(t.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, option, &tv, sizeof tv);
}

void tune_tcp(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  unsigned user_timeout_ms = 10000;
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms,
               sizeof user_timeout_ms);
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  int idle = 5, interval = 2, count = 3;
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

void tune_unix(int fd) {
  int bytes = 4 << 20;
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

std::string peer_address(int fd, const sockaddr_storage& sa) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (sa.ss_family == AF_UNIX) {
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
      return "unix:pid " + std::to_string(cred.pid);
    return "unix:?";
  }
  if (sa.ss_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(&sa);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
  } else if (sa.ss_family == AF_INET6) {
    auto* in = reinterpret_cast<const sockaddr_in6*>(&sa);
    ::inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof host);
    port = ntohs(in->sin6_port);
  }
  return std::string{host} + ":" + std::to_string(port);
}

void stream::shut() {
  ::shutdown(fd_, SHUT_RDWR);
}

namespace {

std::string ended_inside(size_t got, size_t n) {
  return "the connection ended inside a frame (" + std::to_string(got) + " of "
         + std::to_string(n) + " bytes)";
}

// A blocking socket: reads and writes are the system's, with SO_RCVTIMEO
// and SO_SNDTIMEO as their limits.
class socket_stream final : public stream {
public:
  socket_stream(int fd, bool unix_socket) : stream(fd), unix_(unix_socket) {
    set_timeout(fd_, SO_SNDTIMEO, write_timeout);
  }
  ~socket_stream() override {
    if (passed_ >= 0)
      ::close(passed_);
  }

  std::string read_exact(void* p, size_t n, bool eof_ok) override {
    auto* at = static_cast<char*>(p);
    size_t got = 0;
    while (got < n) {
      auto r = unix_ ? receive(at + got, n - got)
                     : ::recv(fd_, at + got, n - got, 0);
      if (r > 0) {
        got += static_cast<size_t>(r);
        continue;
      }
      if (r == 0)
        return got == 0 && eof_ok ? "closed" : ended_inside(got, n);
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return "timed out";
      return errno_text(errno);
    }
    return {};
  }

  std::string write_all(std::vector<iovec> iov) override {
    size_t first = 0;
    while (first < iov.size()) {
      auto count = std::min<size_t>(iov.size() - first, IOV_MAX);
      msghdr mh{};
      mh.msg_iov = iov.data() + first;
      mh.msg_iovlen = count;
      auto r = ::sendmsg(fd_, &mh, MSG_NOSIGNAL);
      if (r < 0) {
        if (errno == EINTR)
          continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
          return "timed out";
        return errno_text(errno);
      }
      auto left = static_cast<size_t>(r);
      while (first < iov.size() && left >= iov[first].iov_len) {
        left -= iov[first].iov_len;
        ++first;
      }
      if (left > 0) {
        iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
        iov[first].iov_len -= left;
      }
    }
    return {};
  }

  void set_read_timeout(std::chrono::milliseconds t) override {
    set_timeout(fd_, SO_RCVTIMEO, t);
  }

  std::string kind() const override { return unix_ ? "a Unix socket" : "TCP"; }

  std::string write_with_fd(std::vector<iovec> iov, int fd) override {
    if (!unix_ || iov.empty() || iov[0].iov_len == 0)
      return stream::write_with_fd(std::move(iov), fd);
    // The descriptor goes with the first byte; the rest, if the kernel
    // took only part, goes as usual.
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr mh{};
    mh.msg_iov = iov.data();
    mh.msg_iovlen = 1;
    mh.msg_control = control;
    mh.msg_controllen = sizeof control;
    auto* cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cm), &fd, sizeof fd);
    ssize_t r;
    do
      r = ::sendmsg(fd_, &mh, MSG_NOSIGNAL);
    while (r < 0 && errno == EINTR);
    if (r <= 0)
      return r < 0 ? errno_text(errno) : "nothing was written";
    iov[0].iov_base = static_cast<char*>(iov[0].iov_base) + r;
    iov[0].iov_len -= static_cast<size_t>(r);
    return write_all(std::move(iov));
  }

  int take_fd() override {
    int fd = passed_;
    passed_ = -1;
    return fd;
  }

private:
  // recv(2), keeping the first file descriptor that comes with the bytes
  // until it is taken; any other is closed at once (a peer cannot make
  // this process hold more than one).
  ssize_t receive(char* p, size_t n) {
    alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))];
    iovec iov{p, n};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = control;
    mh.msg_controllen = sizeof control;
    auto r = ::recvmsg(fd_, &mh, MSG_CMSG_CLOEXEC);
    if (r < 0 || mh.msg_controllen == 0)
      return r;
    for (auto* cm = CMSG_FIRSTHDR(&mh); cm != nullptr;
         cm = CMSG_NXTHDR(&mh, cm)) {
      if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
        continue;
      auto count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
        if (passed_ < 0)
          passed_ = fd;
        else
          ::close(fd);
      }
    }
    return r;
  }

  bool unix_;
  int passed_ = -1; // came with bytes read, not taken yet
};

std::string openssl_errors() {
  std::string text;
  while (auto err = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(err, buf, sizeof buf);
    text += (text.empty() ? "" : "; ") + std::string{buf};
  }
  return text;
}

// OpenSSL writes with write(2), which raises SIGPIPE on a connection the
// peer closed, and that ends the process. So while a thread is inside
// OpenSSL, SIGPIPE is blocked for it, and one raised then is taken before
// the thread's mask is restored (as CAF's OpenSSL module does).
class sigpipe_blocked {
public:
  sigpipe_blocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &pipe_, &saved_);
  }
  ~sigpipe_blocked() {
    timespec now{};
    while (::sigtimedwait(&pipe_, nullptr, &now) == SIGPIPE) {
    }
    ::pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
  }
  sigpipe_blocked(const sigpipe_blocked&) = delete;
  sigpipe_blocked& operator=(const sigpipe_blocked&) = delete;

private:
  sigset_t pipe_;
  sigset_t saved_;
};

// Until `fd` is ready for `events`; "" or why not ("timed out"). `t` 0:
// no limit.
std::string wait_for(int fd, short events, std::chrono::milliseconds t) {
  pollfd p{fd, events, 0};
  for (;;) {
    int n = ::poll(&p, 1, t.count() > 0 ? static_cast<int>(t.count()) : -1);
    if (n > 0)
      return {};
    if (n == 0)
      return "timed out";
    if (errno != EINTR)
      return errno_text(errno);
  }
}

// TLS on a non-blocking socket. OpenSSL allows one call on an SSL object at
// a time, so every call holds `mtx_`, and none waits while holding it: a
// reader that needs bytes and a writer whose peer is not reading poll the
// socket outside it. (Holding it while waiting deadlocks two peers that
// both write: neither would read.) Small pieces of a frame (the header,
// the descriptor) are gathered into one TLS record with what follows.
class tls_stream final : public stream {
public:
  tls_stream(int fd, SSL* ssl, bool unix_socket)
    : stream(fd), ssl_(ssl), unix_(unix_socket) {}
  ~tls_stream() override { SSL_free(ssl_); }

  std::string read_exact(void* p, size_t n, bool eof_ok) override {
    auto* at = static_cast<char*>(p);
    size_t got = 0;
    while (got < n) {
      size_t r = 0;
      auto c = call([&] { return SSL_read_ex(ssl_, at + got, n - got, &r); });
      if (c.rc == 1) {
        got += r;
        continue;
      }
      std::string why;
      switch (c.err) {
        case SSL_ERROR_WANT_READ:
          why = wait_for(fd_, POLLIN, read_timeout_);
          break;
        case SSL_ERROR_WANT_WRITE:
          why = wait_for(fd_, POLLOUT, write_timeout);
          break;
        case SSL_ERROR_ZERO_RETURN:
          return got == 0 && eof_ok ? "closed" : ended_inside(got, n);
        case SSL_ERROR_SYSCALL:
          if (c.sys_err == 0)
            return got == 0 && eof_ok ? "closed" : ended_inside(got, n);
          return errno_text(c.sys_err);
        default:
          return c.failure();
      }
      if (!why.empty())
        return why;
    }
    return {};
  }

  std::string write_all(std::vector<iovec> iov) override {
    constexpr size_t gather_below = 16384;
    std::string small; // small pieces not written yet
    for (auto& piece : iov) {
      auto* at = static_cast<const char*>(piece.iov_base);
      if (piece.iov_len < gather_below) {
        small.append(at, piece.iov_len);
        if (small.size() < gather_below)
          continue;
        at = nullptr;
      }
      if (!small.empty()) {
        if (auto why = write(small.data(), small.size()); !why.empty())
          return why;
        small.clear();
      }
      if (at != nullptr)
        if (auto why = write(at, piece.iov_len); !why.empty())
          return why;
    }
    return small.empty() ? std::string{} : write(small.data(), small.size());
  }

  void set_read_timeout(std::chrono::milliseconds t) override {
    read_timeout_ = t;
  }

  std::string kind() const override {
    return unix_ ? "TLS over a Unix socket" : "TLS over TCP";
  }

private:
  // What an OpenSSL call on the session returned, and why when it failed.
  struct outcome {
    int rc = 0;
    int err = SSL_ERROR_NONE; // SSL_get_error's
    int sys_err = 0;          // errno right after the call
    std::string detail;       // OpenSSL's error queue
    std::string failure() const {
      return "TLS: "
             + (detail.empty() ? "error " + std::to_string(err) : detail);
    }
  };

  // Runs `op` (SSL_read_ex, SSL_write_ex) under the lock, SIGPIPE blocked.
  template <class Op>
  outcome call(Op op) {
    outcome c;
    std::lock_guard<std::mutex> g(mtx_);
    sigpipe_blocked quiet;
    ERR_clear_error();
    errno = 0;
    c.rc = op();
    if (c.rc != 1) {
      c.sys_err = errno;
      c.err = SSL_get_error(ssl_, c.rc);
      c.detail = openssl_errors();
    }
    return c;
  }

  std::string write(const char* at, size_t left) {
    while (left > 0) {
      size_t w = 0;
      auto c = call([&] { return SSL_write_ex(ssl_, at, left, &w); });
      if (c.rc == 1) {
        at += w;
        left -= w;
        continue;
      }
      std::string why;
      if (c.err == SSL_ERROR_WANT_WRITE)
        why = wait_for(fd_, POLLOUT, write_timeout);
      else if (c.err == SSL_ERROR_WANT_READ)
        why = wait_for(fd_, POLLIN, write_timeout);
      else if (c.err == SSL_ERROR_SYSCALL && c.sys_err != 0)
        return errno_text(c.sys_err);
      else
        return c.failure();
      if (!why.empty())
        return why;
    }
    return {};
  }

  SSL* ssl_;
  bool unix_;
  std::mutex mtx_;
  std::chrono::milliseconds read_timeout_{0};
};

class tls_context_impl final : public tls_context {
public:
  explicit tls_context_impl(SSL_CTX* ctx) : ctx_(ctx) {}
  ~tls_context_impl() override { SSL_CTX_free(ctx_); }

  std::unique_ptr<stream> wrap(int fd, bool unix_socket, bool dialed,
                               std::chrono::milliseconds timeout,
                               std::string& why) override {
    ERR_clear_error();
    SSL* ssl = SSL_new(ctx_);
    if (ssl == nullptr || SSL_set_fd(ssl, fd) != 1) {
      why = "TLS: cannot start a session: " + openssl_errors();
      SSL_free(ssl);
      return nullptr;
    }
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      ERR_clear_error();
      int rc = 0, sys_err = 0;
      {
        sigpipe_blocked quiet;
        errno = 0;
        rc = dialed ? SSL_connect(ssl) : SSL_accept(ssl);
        sys_err = errno;
      }
      if (rc == 1)
        break;
      int err = SSL_get_error(ssl, rc);
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
      std::string wait;
      if ((err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE)
          && left.count() > 0) {
        wait =
          wait_for(fd, err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, left);
        if (wait.empty())
          continue;
      }
      bool not_tls =
        ERR_GET_REASON(ERR_peek_error()) == SSL_R_WRONG_VERSION_NUMBER
        || ERR_GET_REASON(ERR_peek_error()) == SSL_R_HTTP_REQUEST;
      auto detail = openssl_errors();
      long verify = SSL_get_verify_result(ssl);
      if (not_tls)
        detail = "the peer does not speak TLS (" + detail
                 + "): is it a node without --tls-*?";
      else if (verify != X509_V_OK)
        detail = std::string{"the peer's certificate: "}
                 + X509_verify_cert_error_string(verify);
      else if (detail.empty())
        detail = err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE
                   ? "timed out"
                 : err == SSL_ERROR_SYSCALL
                   ? (sys_err != 0 ? errno_text(sys_err)
                                   : std::string{"the peer closed"})
                   : "error " + std::to_string(err);
      why = "TLS handshake failed: " + detail;
      SSL_free(ssl);
      return nullptr;
    }
    return std::make_unique<tls_stream>(fd, ssl, unix_socket);
  }

private:
  SSL_CTX* ctx_;
};

} // namespace

std::unique_ptr<stream> plain_stream(int fd, bool unix_socket) {
  return std::make_unique<socket_stream>(fd, unix_socket);
}

std::shared_ptr<tls_context> tls_context::make(const std::string& cert,
                                               const std::string& key,
                                               const std::string& ca) {
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_method());
  if (ctx == nullptr)
    throw std::runtime_error("data plane: cannot create a TLS context: "
                             + openssl_errors());
  auto result = std::make_shared<tls_context_impl>(ctx);
  auto fail = [&](const std::string& what, const std::string& file) {
    throw std::runtime_error("data plane: " + what + " '" + file
                             + "' does not load (" + openssl_errors() + ")");
  };
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  // A peer that closes without TLS's close_notify (it shuts its socket, or
  // died) ends the stream as a plain socket's end would: "closed" between
  // frames, "ended inside a frame" within one.
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE
                          | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // No resumption: every connection makes the full mutual check, and no
  // ticket arrives for the reader to handle after the handshake.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_num_tickets(ctx, 0);
  if (SSL_CTX_use_certificate_chain_file(ctx, cert.c_str()) != 1)
    fail("the certificate", cert);
  if (SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1
      || SSL_CTX_check_private_key(ctx) != 1)
    fail("the key", key);
  if (SSL_CTX_load_verify_locations(ctx, ca.c_str(), nullptr) != 1)
    fail("the CA file", ca);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                     nullptr);
  return result;
}

} // namespace af::detail
