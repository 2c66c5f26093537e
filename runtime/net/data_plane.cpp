// The data plane: messages between actors on two nodes straight from the
// sending node to the receiving one, on a connection per pair of processes;
// listening, dialing, routes, the job's secret, drain. Declared in
// runtime/net/data_plane.hpp.
#include "actorflow/runtime/net/detail/data_plane_impl.hpp"

namespace af {

namespace detail {

// --- plane ---------------------------------------------------------------

void plane_impl::drain(const caf::node_id& node, std::function<void()> done) {
  std::vector<std::shared_ptr<connection>> to;
  {
    std::lock_guard<std::mutex> g(mtx_);
    for (auto& c : all_)
      if (c->peer() == node && c->open())
        to.push_back(c);
  }
  // `done` once every connection answered (or closed).
  auto left = std::make_shared<std::atomic<size_t>>(to.size() + 1);
  auto shared = std::make_shared<std::function<void()>>(std::move(done));
  auto one = [left, shared] {
    if (--*left == 0)
      (*shared)();
  };
  for (auto& c : to)
    if (!c->ping(one))
      one();
  one();
}

void plane_impl::listen() {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  auto port_text = std::to_string(opts_.port);
  if (int rc = ::getaddrinfo(opts_.listen_host.c_str(), port_text.c_str(),
                             &hints, &res);
      rc != 0)
    throw std::runtime_error("data plane: cannot listen on " + opts_.listen_host
                             + ": " + gai_strerror(rc));
  std::string why = "no address";
  for (auto* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd =
      ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      why = errno_text(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0
        || ::listen(fd, 128) != 0) {
      why = errno_text(errno);
      ::close(fd);
      continue;
    }
    sockaddr_storage sa{};
    socklen_t len = sizeof sa;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
    port_ = sa.ss_family == AF_INET6
              ? ntohs(reinterpret_cast<sockaddr_in6*>(&sa)->sin6_port)
              : ntohs(reinterpret_cast<sockaddr_in*>(&sa)->sin_port);
    listen_fd_ = fd;
    break;
  }
  ::freeaddrinfo(res);
  if (listen_fd_ < 0)
    throw std::runtime_error("data plane: cannot listen on " + opts_.listen_host
                             + ":" + port_text + ": " + why);
  if (opts_.local_sockets)
    listen_unix();
  if (::pipe2(wake_, O_CLOEXEC) != 0)
    throw std::runtime_error("data plane: cannot make a pipe: "
                             + errno_text(errno));
  acceptor_ = std::thread([this] {
    ::pthread_setname_np(::pthread_self(), "af.data.accept");
    accept_loop();
  });
}

// The name of a node's Unix socket: in the abstract namespace, so it is
// seen only by processes in the same network namespace (as its loopback
// address is) and leaves no file behind. The node id names the machine
// and the process.
// Its address; false when the name does not fit (it always does: a node
// id is about 50 characters).
bool unix_address(const caf::node_id& node, sockaddr_un& sa, socklen_t& len) {
  auto name = std::string(1, '\0') + "actorflow-data/" + caf::to_string(node);
  sa = sockaddr_un{};
  sa.sun_family = AF_UNIX;
  if (name.size() > sizeof sa.sun_path)
    return false;
  std::memcpy(sa.sun_path, name.data(), name.size());
  len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
  return true;
}

void plane_impl::listen_unix() {
  // Without CAF's middleman a system has no node id ("invalid-node"),
  // which every such process on the machine shares: the name would be
  // taken by whichever bound it first, and no peer can name this node
  // anyway.
  if (!sys_.node())
    return;
  sockaddr_un sa;
  socklen_t len = 0;
  if (!unix_address(sys_.node(), sa, len))
    return;
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&sa), len) != 0
      || ::listen(fd, 128) != 0) {
    spdlog::warn("data plane: no Unix socket for peers on this machine "
                 "({}); they connect over TCP",
                 errno_text(errno));
    if (fd >= 0)
      ::close(fd);
    return;
  }
  unix_fd_ = fd;
}

void plane_impl::accept_loop() {
  for (;;) {
    pollfd p[3] = {
      {wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}, {unix_fd_, POLLIN, 0}};
    if (::poll(p, unix_fd_ >= 0 ? 3 : 2, -1) < 0) {
      if (errno == EINTR)
        continue;
      spdlog::error("data plane: poll failed: {}", errno_text(errno));
      return;
    }
    if (p[0].revents != 0)
      return; // stop()
    if (p[1].revents != 0)
      accept_one(listen_fd_, false);
    if (unix_fd_ >= 0 && p[2].revents != 0)
      accept_one(unix_fd_, true);
  }
}

void plane_impl::accept_one(int listener, bool unix_socket) {
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  int fd =
    ::accept4(listener, reinterpret_cast<sockaddr*>(&sa), &len, SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno == EMFILE || errno == ENFILE || errno == ENOMEM)
      std::this_thread::sleep_for(std::chrono::milliseconds{50});
    else if (errno != EINTR && errno != ECONNABORTED && errno != EAGAIN)
      spdlog::warn("data plane: accept failed: {}", errno_text(errno));
    return;
  }
  if (unix_socket)
    tune_unix(fd);
  else
    tune_tcp(fd);
  auto c = std::make_shared<connection>(*this, fd, unix_socket,
                                        peer_address(fd, sa), false);
  {
    std::lock_guard<std::mutex> g(mtx_);
    if (stopping_)
      return; // c closes fd
    all_.push_back(c);
  }
  c->start(true);
}

std::shared_ptr<connection> plane_impl::link_to(const caf::node_id& node,
                                                std::string* why) {
  data_route r;
  {
    std::lock_guard<std::mutex> g(mtx_);
    if (stopping_)
      return nullptr;
    if (auto it = links_.find(node); it != links_.end() && it->second->open())
      return it->second;
    auto it = routes_.find(node);
    if (it == routes_.end())
      return nullptr;
    r = it->second;
    if (auto f = failed_.find(node);
        why == nullptr && f != failed_.end()
        && clock_type::now() - f->second < std::chrono::seconds{1})
      return nullptr;
  }
  std::lock_guard<std::mutex> dg(dial_mtx_);
  {
    std::lock_guard<std::mutex> g(mtx_);
    if (auto it = links_.find(node); it != links_.end() && it->second->open())
      return it->second;
  }
  std::string problem;
  auto c = dial(r, problem);
  std::lock_guard<std::mutex> g(mtx_);
  if (!c) {
    auto [it, first] = failed_.emplace(node, clock_type::now());
    it->second = clock_type::now();
    if (first && why == nullptr)
      spdlog::warn("data plane: cannot reach {} at {}:{} ({}); its "
                   "messages go through CAF until it can",
                   r.name, r.host, r.port, problem);
    if (why != nullptr)
      *why = problem;
    return nullptr;
  }
  failed_.erase(node);
  if (stopping_) {
    c->shut();
    return nullptr;
  }
  links_[node] = c;
  all_.push_back(c);
  c->start(false);
  spdlog::info("data plane: connected to {} over {}",
               r.name.empty() ? c->name() : r.name, c->how());
  return c;
}

int plane_impl::connect_unix(const caf::node_id& node) {
  sockaddr_un sa;
  socklen_t len = 0;
  if (!unix_address(node, sa, len))
    return -1;
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  tune_unix(fd);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), len) != 0) {
    ::close(fd); // another network namespace or machine: no such socket
    return -1;
  }
  // Anybody in this network namespace may bind an abstract name: the
  // socket must belong to the node's process (same process id, when both
  // see the same process ids), or the hello would tell a stranger the
  // job's secret.
  ucred cred{};
  socklen_t clen = sizeof cred;
  uint32_t pid = 0;
  if (node->implementation_id() == caf::node_id::default_data::class_id)
    pid = static_cast<const caf::node_id::default_data&>(*node).process_id();
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0
      || static_cast<uint32_t>(cred.pid) != pid) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int plane_impl::connect_tcp(const data_route& r, std::string& why) {
  auto where = r.host + ":" + std::to_string(r.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  auto port_text = std::to_string(r.port);
  if (int rc = ::getaddrinfo(r.host.c_str(), port_text.c_str(), &hints, &res);
      rc != 0) {
    why = "cannot resolve " + r.host + ": " + gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  why = "cannot connect to " + where;
  for (auto* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
    int s =
      ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (s < 0)
      continue;
    // Connect within the dial timeout, then block again.
    ::fcntl(s, F_SETFL, O_NONBLOCK);
    int rc = ::connect(s, ai->ai_addr, ai->ai_addrlen);
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      pollfd p{s, POLLOUT, 0};
      int n = ::poll(&p, 1, static_cast<int>(opts_.dial_timeout.count()));
      socklen_t len = sizeof err;
      if (n == 1)
        ::getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
      else
        err = ETIMEDOUT;
    }
    if (err != 0) {
      why = "cannot connect to " + where + ": " + errno_text(err);
      ::close(s);
      continue;
    }
    ::fcntl(s, F_SETFL, 0);
    fd = s;
  }
  ::freeaddrinfo(res);
  if (fd >= 0)
    tune_tcp(fd);
  return fd;
}

int plane_impl::connect_to(const data_route& r, bool& unix_socket,
                           std::string& why) {
  unix_socket = false;
  if (opts_.local_sockets) {
    if (int fd = connect_unix(r.node); fd >= 0) {
      unix_socket = true;
      return fd;
    }
  }
  return connect_tcp(r, why);
}

std::shared_ptr<connection> plane_impl::dial(const data_route& r,
                                             std::string& why) {
  auto where = r.host + ":" + std::to_string(r.port);
  bool unix_socket = false;
  int fd = connect_to(r, unix_socket, why);
  if (fd < 0)
    return nullptr;
  std::unique_ptr<stream> io;
  if (tls_) {
    io = tls_->wrap(fd, unix_socket, true, opts_.dial_timeout, why);
    if (!io) {
      ::close(fd);
      why = where + ": " + why;
      return nullptr;
    }
  } else {
    io = plain_stream(fd, unix_socket);
  }
  io->set_read_timeout(opts_.dial_timeout);
  auto& s = *io;
  auto c = std::make_shared<connection>(
    *this, fd, unix_socket,
    r.name.empty() ? where : r.name + " (" + where + ")", true, std::move(io));
  // Hello: the secret and who we are.
  std::vector<char> out;
  caf::binary_serializer sink{sys_, out};
  auto secret = r.secret;
  auto me = sys_.node();
  if (auto err = sink(secret, me)) {
    why = "cannot write the hello";
    return nullptr;
  }
  data_frame::header h;
  h.type = data_frame::kind::hello;
  h.descriptor = static_cast<uint32_t>(out.size());
  std::byte head[data_frame::header_size];
  data_frame::encode(h, head);
  if (auto w =
        s.write_all({iovec{head, sizeof head}, iovec{out.data(), out.size()}});
      !w.empty()) {
    why = "hello to " + where + ": " + w;
    return nullptr;
  }
  std::byte whead[data_frame::header_size];
  if (auto w = s.read_exact(whead, sizeof whead); !w.empty()) {
    why = where + " did not welcome us (" + w
          + "): a wrong job secret, or not a data port";
    return nullptr;
  }
  data_frame::header wh;
  if (auto w = data_frame::decode(whead, wh);
      !w.empty() || wh.type != data_frame::kind::welcome) {
    why =
      where + " is not a data port (" + (w.empty() ? "no welcome" : w) + ")";
    return nullptr;
  }
  std::vector<char> desc(wh.descriptor);
  caf::node_id node;
  if (auto w = s.read_exact(desc.data(), desc.size()); !w.empty()) {
    why = "welcome from " + where + ": " + w;
    return nullptr;
  }
  caf::binary_deserializer in{sys_, desc};
  if (auto err = in(node); err || in.remaining() != 0) {
    why = "a malformed welcome from " + where;
    return nullptr;
  }
  if (node != r.node) {
    why = where + " is another node (" + caf::to_string(node) + ")";
    return nullptr;
  }
  if (auto w = c->offer_region(); !w.empty()) {
    why = where + ": " + w;
    return nullptr;
  }
  s.set_read_timeout(std::chrono::milliseconds{0});
  c->set_peer(node, {});
  ++dialed;
  if (unix_socket)
    ++local;
  return c;
}

void plane_impl::stop() {
  std::vector<std::shared_ptr<connection>> all;
  {
    std::lock_guard<std::mutex> g(mtx_);
    if (stopping_)
      return;
    stopping_ = true;
    all.swap(all_);
  }
  if (wake_[1] >= 0) {
    char one = 1;
    while (::write(wake_[1], &one, 1) < 0 && errno == EINTR) {
    }
  }
  if (acceptor_.joinable())
    acceptor_.join();
  for (int* fd : {&listen_fd_, &unix_fd_, &wake_[0], &wake_[1]})
    if (*fd >= 0) {
      ::close(*fd);
      *fd = -1;
    }
  for (auto& c : all)
    c->shut();
  for (auto& c : all)
    c->join();
  std::lock_guard<std::mutex> g(mtx_);
  links_.clear();
}

std::mutex planes_mtx;
// Never destroyed: a data plane nobody stopped must not be torn down
// after its actor system, at static destruction.
std::map<caf::actor_system*, std::shared_ptr<plane_impl>>& planes() {
  static auto* all =
    new std::map<caf::actor_system*, std::shared_ptr<plane_impl>>;
  return *all;
}

} // namespace detail

using namespace detail;

std::shared_ptr<data_plane> data_plane::start(caf::actor_system& sys,
                                              const options& opts) {
  std::lock_guard<std::mutex> g(planes_mtx);
  auto& slot = planes()[&sys];
  if (!slot) {
    auto p = std::make_shared<plane_impl>(sys, opts);
    // With TLS between nodes (--tls-*), the data plane is TLS with the
    // same files and the same mutual check.
    if (sys.has_openssl_manager()) {
      auto& cfg = sys.config();
      p->use_tls(tls_context::make(cfg.openssl_certificate, cfg.openssl_key,
                                   cfg.openssl_cafile));
    }
    if (!opts.listen_host.empty())
      p->listen();
    slot = std::move(p);
  }
  return slot;
}

std::shared_ptr<data_plane> data_plane::of(caf::actor_system& sys) {
  std::lock_guard<std::mutex> g(planes_mtx);
  auto it = planes().find(&sys);
  return it == planes().end() ? nullptr : it->second;
}

void data_plane::stop(caf::actor_system& sys) {
  std::shared_ptr<plane_impl> p;
  {
    std::lock_guard<std::mutex> g(planes_mtx);
    auto it = planes().find(&sys);
    if (it == planes().end())
      return;
    p = std::move(it->second);
    planes().erase(it);
  }
  p->stop();
}

caf::actor data_plane::route(caf::actor_system& sys, const caf::actor& remote) {
  if (!remote || remote.node() == sys.node())
    return remote;
  auto p = of(sys);
  return p ? p->route(remote) : remote;
}

std::shared_ptr<buffer> data_plane::shared_buffer(caf::actor_system& sys,
                                                  const caf::actor& remote,
                                                  size_t bytes) {
  if (!remote || remote.node() == sys.node())
    return nullptr;
  auto p = of(sys);
  return p ? p->shared_buffer(remote, bytes) : nullptr;
}

std::string make_job_secret() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof bytes) != 1)
    throw std::runtime_error("cannot make a job secret: OpenSSL's random "
                             "generator failed");
  return std::string(reinterpret_cast<char*>(bytes), sizeof bytes);
}

} // namespace af
