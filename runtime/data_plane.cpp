#include "runtime/data_plane.hpp"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <utility>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <caf/actor_config.hpp>
#include <caf/actor_proxy.hpp>
#include <caf/actor_registry.hpp>
#include <caf/actor_system.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/exit_reason.hpp>
#include <caf/mailbox_element.hpp>
#include <caf/make_actor.hpp>
#include <caf/message.hpp>
#include <caf/sec.hpp>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <spdlog/spdlog.h>

#include "runtime/data_frame.hpp"
#include "runtime/failpoint.hpp"

namespace af {

namespace {

using clock_type = std::chrono::steady_clock;

std::string errno_text(int e) {
  return std::strerror(e);
}

void set_timeout(int fd, int option, std::chrono::milliseconds t) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(t.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, option, &tv, sizeof tv);
}

// Small frames go out at once, and a peer that stops acknowledging (its
// machine froze, the link was cut) fails the connection within about ten
// seconds, writing or idle, instead of never.
void tune(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  set_timeout(fd, SO_SNDTIMEO, std::chrono::seconds{10});
  unsigned user_timeout_ms = 10000;
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms,
               sizeof user_timeout_ms);
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  int idle = 5, interval = 2, count = 3;
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

// "" once all of [p, p + n) was read; else why not. `eof_ok`: an end of
// stream before the first byte is a clean close ("closed").
std::string read_exact(int fd, void* p, size_t n, bool eof_ok = false) {
  auto* at = static_cast<char*>(p);
  size_t got = 0;
  while (got < n) {
    auto r = ::recv(fd, at + got, n - got, 0);
    if (r > 0) {
      got += static_cast<size_t>(r);
      continue;
    }
    if (r == 0)
      return got == 0 && eof_ok
               ? "closed"
               : "the connection ended inside a frame (" + std::to_string(got)
                   + " of " + std::to_string(n) + " bytes)";
    if (errno == EINTR)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return "timed out";
    return errno_text(errno);
  }
  return {};
}

// "" once every byte of `iov` was written.
std::string write_all(int fd, std::vector<iovec> iov) {
  size_t first = 0;
  while (first < iov.size()) {
    auto count = std::min<size_t>(iov.size() - first, IOV_MAX);
    msghdr mh{};
    mh.msg_iov = iov.data() + first;
    mh.msg_iovlen = count;
    auto r = ::sendmsg(fd, &mh, MSG_NOSIGNAL);
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

std::string peer_address(const sockaddr_storage& sa) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
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

struct fd_source final : data_frame::source {
  int fd;
  explicit fd_source(int f) : fd(f) {}
  caf::error read(void* into, size_t n) override {
    auto why = read_exact(fd, into, n);
    if (why.empty())
      return caf::none;
    return caf::make_error(caf::sec::end_of_stream, why);
  }
};

class plane_impl;

class connection : public std::enable_shared_from_this<connection> {
public:
  connection(plane_impl& plane, int fd, std::string name, bool dialed)
    : plane_(plane), fd_(fd), name_(std::move(name)), dialed_(dialed) {}
  ~connection() {
    if (fd_ >= 0)
      ::close(fd_);
  }

  const std::string& name() const { return name_; }
  caf::node_id peer() const {
    std::lock_guard<std::mutex> g(mtx_);
    return peer_;
  }
  // Once, by the thread that made the handshake, before any frame.
  void set_peer(caf::node_id n, std::string name) {
    std::lock_guard<std::mutex> g(mtx_);
    peer_ = std::move(n);
    if (!name.empty())
      name_ = std::move(name);
  }
  bool open() const {
    std::lock_guard<std::mutex> g(mtx_);
    return !closed_;
  }

  // Writes `msg` for actor `target` on the peer; false when the connection
  // is closed or the write failed (the reader then closes it).
  bool send(const caf::strong_actor_ptr& sender, uint64_t target,
            caf::message_id mid, caf::message& msg);
  // The stand-in of actor `aid` of the peer.
  caf::strong_actor_ptr stand_in(caf::actor_id aid);

  // Sends a ping; `done` runs when its pong arrived or the connection
  // closed. False (and `done` not kept) when it is closed already.
  bool ping(std::function<void()> done);

  void start(bool hello_first);
  // Wakes the reader: it closes the connection.
  void shut() { ::shutdown(fd_, SHUT_RDWR); }
  void join() {
    if (reader_.joinable())
      reader_.join();
  }

private:
  void run(bool hello_first);
  std::string take_hello();
  std::string read_frames();
  std::string deliver(const data_frame::header& h,
                      const std::vector<char>& descriptor);
  caf::strong_actor_ptr local(caf::actor_id aid);
  void close();

  plane_impl& plane_;
  int fd_;
  std::string name_;
  bool dialed_;
  caf::node_id peer_;
  std::thread reader_;
  std::mutex write_mtx_;
  mutable std::mutex mtx_;
  bool closed_ = false;
  std::unordered_map<caf::actor_id, caf::strong_actor_ptr> stand_ins_;
  // Local actors that sent through this connection: answers come back to
  // them (a caf::scoped_actor is in no registry).
  std::unordered_map<caf::actor_id, caf::weak_actor_ptr> locals_;
  // Requests sent and not answered yet: (sender, request id) -> target.
  std::map<std::pair<caf::actor_id, uint64_t>, caf::actor_id> pending_;
  // Pings sent and not answered yet, by token.
  std::map<uint64_t, std::function<void()>> pings_;
  uint64_t next_ping_ = 1;
  // Writes a frame that is a header only (ping, pong).
  bool send_control(data_frame::kind k, uint64_t token);
};

// A remote actor's stand-in on a connection, as caf::forwarding_actor_proxy
// is on CAF's: what is enqueued to it is written to the connection.
class data_proxy final : public caf::actor_proxy {
public:
  data_proxy(caf::actor_config& cfg, std::weak_ptr<connection> conn)
    : caf::actor_proxy(cfg), conn_(std::move(conn)) {}

  using caf::actor_proxy::enqueue;

  void enqueue(caf::mailbox_element_ptr what,
               caf::execution_unit* ctx) override {
    auto c = conn_.lock();
    auto mid = what->mid;
    auto sender = what->sender;
    auto msg = what->move_content_to_message();
    if (c && c->send(sender, id(), mid, msg))
      return;
    bounce(sender, mid, ctx);
  }

  void kill_proxy(caf::execution_unit* ctx, caf::error reason) override {
    cleanup(std::move(reason), ctx);
  }

  // A request that cannot go out is answered at once, as a dead actor's.
  void bounce(const caf::strong_actor_ptr& sender, caf::message_id mid,
              caf::execution_unit* ctx) {
    if (sender && mid.is_request())
      sender->enqueue(caf::make_mailbox_element(
                        ctrl(), mid.response_id(), {},
                        caf::make_error(caf::sec::request_receiver_down)),
                      ctx);
  }

private:
  std::weak_ptr<connection> conn_;
};

class plane_impl final : public data_plane {
public:
  plane_impl(caf::actor_system& sys, const options& opts)
    : sys_(sys), opts_(opts) {}
  ~plane_impl() override { stop(); }

  void listen();
  void stop();

  caf::actor_system& sys() { return sys_; }
  const options& opts() const { return opts_; }

  uint16_t port() const override { return port_; }
  void accept_secret(const std::string& secret) override {
    std::lock_guard<std::mutex> g(mtx_);
    secrets_.insert(secret);
  }
  bool knows_secret(const std::string& secret) const {
    std::lock_guard<std::mutex> g(mtx_);
    bool ok = false;
    for (auto& s : secrets_)
      if (s.size() == secret.size()
          && CRYPTO_memcmp(s.data(), secret.data(), s.size()) == 0)
        ok = true;
    return ok;
  }
  void add_routes(const std::vector<data_route>& routes) override {
    std::lock_guard<std::mutex> g(mtx_);
    for (auto& r : routes)
      if (r.node != sys_.node() && r.port != 0)
        routes_[r.node] = r;
  }
  std::string probe(const data_route& r) override {
    std::string why;
    if (!link_to(r.node, &why))
      return why.empty() ? "no route" : why;
    return {};
  }
  caf::actor route(const caf::actor& remote) override {
    if (!remote || remote.node() == sys_.node())
      return remote;
    auto c = link_to(remote.node(), nullptr);
    if (!c)
      return remote;
    return caf::actor_cast<caf::actor>(c->stand_in(remote.id()));
  }
  void drain(const caf::node_id& node, std::function<void()> done) override;
  data_plane_stats stats() const override {
    data_plane_stats s;
    s.accepted = accepted.load();
    s.dialed = dialed.load();
    s.refused = refused.load();
    s.broken = broken.load();
    s.frames_sent = frames_sent.load();
    s.frames_received = frames_received.load();
    s.bytes_sent = bytes_sent.load();
    s.bytes_received = bytes_received.load();
    s.undeliverable = undeliverable.load();
    return s;
  }

  // An accepted connection said hello: it may carry messages back.
  void welcomed(const std::shared_ptr<connection>& c) {
    std::lock_guard<std::mutex> g(mtx_);
    auto& slot = links_[c->peer()];
    if (!slot || !slot->open())
      slot = c;
  }
  // A connection closed: the next route() to its node dials again.
  void forget(connection* c) {
    std::lock_guard<std::mutex> g(mtx_);
    for (auto it = links_.begin(); it != links_.end(); ++it)
      if (it->second.get() == c) {
        links_.erase(it);
        break;
      }
  }
  std::string name_of(const caf::node_id& node) const {
    std::lock_guard<std::mutex> g(mtx_);
    auto it = routes_.find(node);
    return it == routes_.end() ? std::string{} : it->second.name;
  }

  std::atomic<uint64_t> accepted{0}, dialed{0}, refused{0}, broken{0},
    frames_sent{0}, frames_received{0}, bytes_sent{0}, bytes_received{0},
    undeliverable{0};

private:
  std::shared_ptr<connection> link_to(const caf::node_id& node,
                                      std::string* why);
  std::shared_ptr<connection> dial(const data_route& r, std::string& why);
  void accept_loop();

  caf::actor_system& sys_;
  options opts_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::thread acceptor_;
  std::mutex dial_mtx_;
  mutable std::mutex mtx_;
  bool stopping_ = false;
  std::set<std::string> secrets_;
  std::map<caf::node_id, data_route> routes_;
  std::map<caf::node_id, std::shared_ptr<connection>> links_;
  std::vector<std::shared_ptr<connection>> all_;
  // A node that could not be dialed: not tried again for a second, and
  // warned about once until it can be reached again.
  std::map<caf::node_id, clock_type::time_point> failed_;
};

// --- connection ----------------------------------------------------------

bool connection::send(const caf::strong_actor_ptr& sender, uint64_t target,
                      caf::message_id mid, caf::message& msg) {
  data_frame::writer w(plane_.sys());
  if (auto err = msg.save(w)) {
    spdlog::error("data plane: cannot write a message for {}: {}", name_,
                  plane_.sys().render(err));
    return false;
  }
  uint64_t from = 0;
  if (sender && sender->node() == plane_.sys().node())
    from = sender->id();
  data_frame::header h;
  h.type = data_frame::kind::message;
  h.target = target;
  h.sender = from;
  h.mid = mid.integer_value();
  h.descriptor = static_cast<uint32_t>(w.descriptor().size());
  h.payload = w.payload();
  if (w.descriptor().size() > data_frame::max_descriptor) {
    spdlog::error("data plane: a message for {} of {} bytes without its "
                  "tensors is too large",
                  name_, w.descriptor().size());
    return false;
  }
  std::byte head[data_frame::header_size];
  data_frame::encode(h, head);
  std::vector<iovec> iov;
  iov.reserve(2 + w.blocks().size());
  iov.push_back(iovec{head, sizeof head});
  if (!w.descriptor().empty())
    iov.push_back(
      iovec{const_cast<char*>(w.descriptor().data()), w.descriptor().size()});
  iov.insert(iov.end(), w.blocks().begin(), w.blocks().end());
  std::lock_guard<std::mutex> wg(write_mtx_);
  auto key = std::make_pair(from, mid.integer_value());
  {
    std::lock_guard<std::mutex> g(mtx_);
    if (closed_)
      return false;
    if (from != 0)
      locals_.emplace(from, caf::actor_cast<caf::weak_actor_ptr>(sender));
    if (from != 0 && mid.is_request())
      pending_[key] = static_cast<caf::actor_id>(target);
  }
  if (auto why = write_all(fd_, std::move(iov)); !why.empty()) {
    spdlog::warn("data plane: cannot write to {}: {}", name_, why);
    {
      std::lock_guard<std::mutex> g(mtx_);
      pending_.erase(key);
    }
    shut();
    return false;
  }
  ++plane_.frames_sent;
  plane_.bytes_sent += sizeof head + h.descriptor + h.payload;
  return true;
}

caf::strong_actor_ptr connection::stand_in(caf::actor_id aid) {
  std::lock_guard<std::mutex> g(mtx_);
  auto& slot = stand_ins_[aid];
  if (!slot) {
    caf::actor_config cfg;
    slot = caf::make_actor<data_proxy, caf::strong_actor_ptr>(
      aid, peer_, &plane_.sys(), cfg, weak_from_this());
    if (closed_) {
      // Gone already: it is born dead, as a proxy of a lost node.
      auto* p = caf::actor_cast<caf::abstract_actor*>(slot);
      static_cast<data_proxy*>(p)->kill_proxy(
        nullptr, caf::exit_reason::remote_link_unreachable);
    }
  }
  return slot;
}

bool connection::send_control(data_frame::kind k, uint64_t token) {
  data_frame::header h;
  h.type = k;
  h.mid = token;
  std::byte head[data_frame::header_size];
  data_frame::encode(h, head);
  std::lock_guard<std::mutex> wg(write_mtx_);
  if (auto why = write_all(fd_, {iovec{head, sizeof head}}); !why.empty()) {
    shut();
    return false;
  }
  return true;
}

bool connection::ping(std::function<void()> done) {
  uint64_t token = 0;
  {
    std::lock_guard<std::mutex> g(mtx_);
    if (closed_)
      return false;
    token = next_ping_++;
    pings_.emplace(token, std::move(done));
  }
  // A failed write closes the connection, which runs `done`.
  send_control(data_frame::kind::ping, token);
  return true;
}

caf::strong_actor_ptr connection::local(caf::actor_id aid) {
  {
    std::lock_guard<std::mutex> g(mtx_);
    if (auto it = locals_.find(aid); it != locals_.end())
      if (auto p = it->second.lock())
        return p;
  }
  return plane_.sys().registry().get(aid);
}

void connection::start(bool hello_first) {
  reader_ = std::thread([self = shared_from_this(), hello_first] {
    // Its own name in top and perf (a thread inherits its creator's).
    ::pthread_setname_np(::pthread_self(), "af.data");
    self->run(hello_first);
  });
}

void connection::run(bool hello_first) {
  if (hello_first) {
    if (auto why = take_hello(); !why.empty()) {
      ++plane_.refused;
      spdlog::warn("data plane: closed the connection from {}: {}", name_, why);
      close();
      return;
    }
    plane_.welcomed(shared_from_this());
  }
  auto why = read_frames();
  if (why != "closed") {
    ++plane_.broken;
    spdlog::warn("data plane: closed the connection {} {}: {}",
                 dialed_ ? "to" : "from", name_, why);
  }
  close();
}

std::string connection::take_hello() {
  set_timeout(fd_, SO_RCVTIMEO, plane_.opts().hello_timeout);
  std::byte head[data_frame::header_size];
  if (auto why = read_exact(fd_, head, sizeof head); !why.empty())
    return "no hello (" + why + ")";
  data_frame::header h;
  if (auto why = data_frame::decode(head, h); !why.empty())
    return "not a hello: " + why;
  if (h.type != data_frame::kind::hello)
    return "the first frame is not a hello";
  std::vector<char> desc(h.descriptor);
  if (auto why = read_exact(fd_, desc.data(), desc.size()); !why.empty())
    return "hello: " + why;
  std::string secret;
  caf::node_id node;
  caf::binary_deserializer in{plane_.sys(), desc};
  if (auto err = in(secret, node); err || in.remaining() != 0 || !node)
    return "a malformed hello";
  if (!plane_.knows_secret(secret))
    return "wrong job secret";
  // The welcome: who we are.
  std::vector<char> out;
  caf::binary_serializer sink{plane_.sys(), out};
  auto me = plane_.sys().node();
  if (auto err = sink(me))
    return "cannot write the welcome";
  data_frame::header w;
  w.type = data_frame::kind::welcome;
  w.descriptor = static_cast<uint32_t>(out.size());
  std::byte whead[data_frame::header_size];
  data_frame::encode(w, whead);
  std::vector<iovec> iov{iovec{whead, sizeof whead},
                         iovec{out.data(), out.size()}};
  if (auto why = write_all(fd_, iov); !why.empty())
    return "cannot answer the hello: " + why;
  set_timeout(fd_, SO_RCVTIMEO, std::chrono::milliseconds{0});
  auto host = plane_.name_of(node);
  set_peer(node, host.empty() ? name_ : host + " (" + name_ + ")");
  ++plane_.accepted;
  return {};
}

std::string connection::read_frames() {
  std::vector<char> desc;
  for (;;) {
    std::byte head[data_frame::header_size];
    if (auto why = read_exact(fd_, head, sizeof head, true); !why.empty())
      return why;
    data_frame::header h;
    if (auto why = data_frame::decode(head, h); !why.empty())
      return why;
    if (h.type == data_frame::kind::ping) {
      if (!send_control(data_frame::kind::pong, h.mid))
        return "cannot answer a ping";
      continue;
    }
    if (h.type == data_frame::kind::pong) {
      std::function<void()> done;
      {
        std::lock_guard<std::mutex> g(mtx_);
        if (auto it = pings_.find(h.mid); it != pings_.end()) {
          done = std::move(it->second);
          pings_.erase(it);
        }
      }
      if (!done)
        return "a pong nobody asked for";
      done();
      continue;
    }
    if (h.type != data_frame::kind::message)
      return "a handshake frame after the handshake";
    desc.resize(h.descriptor);
    if (auto why = read_exact(fd_, desc.data(), desc.size()); !why.empty())
      return why;
    if (auto why = deliver(h, desc); !why.empty())
      return why;
    ++plane_.frames_received;
    plane_.bytes_received += sizeof head + h.descriptor + h.payload;
    if (failpoint_hit("data_plane.cut"))
      return "failpoint data_plane.cut: the connection is cut";
  }
}

std::string connection::deliver(const data_frame::header& h,
                                const std::vector<char>& descriptor) {
  caf::message_id mid{h.mid};
  // CAF's own streams (categories 2 and 3) are no part of our protocols.
  if (mid.category() != caf::message_id::normal_message_category
      && mid.category() != caf::message_id::urgent_message_category)
    return "a message id of CAF stream category "
           + std::to_string(mid.category());
  fd_source payload{fd_};
  data_frame::reader in{plane_.sys(), descriptor, payload, h.payload};
  caf::message msg;
  // message::load, not in(msg): CAF 0.17's data_processor::operator()
  // returns no error when an element of a message fails to load
  // (../shared/docs/caf-notes.md). Some of CAF's own types throw instead
  // (a config_value with a bad variant index: found by fuzz_data_frame).
  try {
    if (auto err = msg.load(in))
      return "a frame that does not read (" + plane_.sys().render(err) + ")";
  } catch (const std::exception& ex) {
    return std::string{"a frame that does not read ("} + ex.what() + ")";
  }
  if (auto left = in.leftover(); !left.empty())
    return "a frame whose parts do not add up: " + left;
  if (mid.is_response()) {
    std::lock_guard<std::mutex> g(mtx_);
    pending_.erase(std::make_pair(static_cast<caf::actor_id>(h.target),
                                  mid.request_id().integer_value()));
  }
  auto dest = local(static_cast<caf::actor_id>(h.target));
  if (!dest) {
    ++plane_.undeliverable;
    if (mid.is_request() && h.sender != 0) {
      // As a dead actor answers: the requester stops waiting.
      auto err =
        caf::make_message(caf::make_error(caf::sec::request_receiver_down));
      send(nullptr, h.sender, mid.response_id(), err);
    }
    return {};
  }
  caf::strong_actor_ptr from;
  if (h.sender != 0)
    from = stand_in(static_cast<caf::actor_id>(h.sender));
  dest->enqueue(
    caf::make_mailbox_element(std::move(from), mid, {}, std::move(msg)),
    nullptr);
  return {};
}

void connection::close() {
  std::unordered_map<caf::actor_id, caf::strong_actor_ptr> stand_ins;
  std::map<std::pair<caf::actor_id, uint64_t>, caf::actor_id> pending;
  std::unordered_map<caf::actor_id, caf::weak_actor_ptr> locals;
  std::map<uint64_t, std::function<void()>> pings;
  {
    std::lock_guard<std::mutex> g(mtx_);
    if (closed_)
      return;
    closed_ = true;
    stand_ins.swap(stand_ins_);
    pending.swap(pending_);
    locals.swap(locals_);
    pings.swap(pings_);
  }
  ::shutdown(fd_, SHUT_RDWR);
  plane_.forget(this);
  // Requests that will not be answered now: as from a lost node.
  for (auto& [key, target] : pending) {
    auto it = locals.find(key.first);
    if (it == locals.end())
      continue;
    auto requester = it->second.lock();
    if (!requester)
      continue;
    caf::strong_actor_ptr from;
    if (auto s = stand_ins.find(target); s != stand_ins.end())
      from = s->second;
    requester->enqueue(caf::make_mailbox_element(
                         std::move(from),
                         caf::message_id{key.second}.response_id(), {},
                         caf::make_error(caf::sec::request_receiver_down)),
                       nullptr);
  }
  for (auto& [aid, p] : stand_ins) {
    auto* proxy = caf::actor_cast<caf::abstract_actor*>(p);
    static_cast<data_proxy*>(proxy)->kill_proxy(
      nullptr, caf::exit_reason::remote_link_unreachable);
  }
  // Nothing more comes on it: what was to be drained is.
  for (auto& [token, done] : pings)
    done();
}

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
  acceptor_ = std::thread([this] {
    ::pthread_setname_np(::pthread_self(), "af.data.accept");
    accept_loop();
  });
}

void plane_impl::accept_loop() {
  for (;;) {
    sockaddr_storage sa{};
    socklen_t len = sizeof sa;
    int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len,
                       SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED)
        continue;
      {
        std::lock_guard<std::mutex> g(mtx_);
        if (stopping_)
          return;
      }
      if (errno == EMFILE || errno == ENFILE || errno == ENOMEM) {
        std::this_thread::sleep_for(std::chrono::milliseconds{50});
        continue;
      }
      spdlog::error("data plane: accept failed: {}", errno_text(errno));
      return;
    }
    tune(fd);
    auto c = std::make_shared<connection>(*this, fd, peer_address(sa), false);
    {
      std::lock_guard<std::mutex> g(mtx_);
      if (stopping_)
        return; // c closes fd
      all_.push_back(c);
    }
    c->start(true);
  }
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
  return c;
}

std::shared_ptr<connection> plane_impl::dial(const data_route& r,
                                             std::string& why) {
  auto where = r.host + ":" + std::to_string(r.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  auto port_text = std::to_string(r.port);
  if (int rc = ::getaddrinfo(r.host.c_str(), port_text.c_str(), &hints, &res);
      rc != 0) {
    why = "cannot resolve " + r.host + ": " + gai_strerror(rc);
    return nullptr;
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
  if (fd < 0)
    return nullptr;
  tune(fd);
  set_timeout(fd, SO_RCVTIMEO, opts_.dial_timeout);
  auto c = std::make_shared<connection>(
    *this, fd, r.name.empty() ? where : r.name + " (" + where + ")", true);
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
  if (auto w = write_all(
        fd, {iovec{head, sizeof head}, iovec{out.data(), out.size()}});
      !w.empty()) {
    why = "hello to " + where + ": " + w;
    return nullptr;
  }
  std::byte whead[data_frame::header_size];
  if (auto w = read_exact(fd, whead, sizeof whead); !w.empty()) {
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
  if (auto w = read_exact(fd, desc.data(), desc.size()); !w.empty()) {
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
  set_timeout(fd, SO_RCVTIMEO, std::chrono::milliseconds{0});
  c->set_peer(node, {});
  ++dialed;
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
  if (listen_fd_ >= 0)
    ::shutdown(listen_fd_, SHUT_RDWR);
  if (acceptor_.joinable())
    acceptor_.join();
  if (listen_fd_ >= 0)
    ::close(listen_fd_);
  listen_fd_ = -1;
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

} // namespace

std::shared_ptr<data_plane> data_plane::start(caf::actor_system& sys,
                                              const options& opts) {
  std::lock_guard<std::mutex> g(planes_mtx);
  auto& slot = planes()[&sys];
  if (!slot) {
    auto p = std::make_shared<plane_impl>(sys, opts);
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

std::string make_job_secret() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof bytes) != 1)
    throw std::runtime_error("cannot make a job secret: OpenSSL's random "
                             "generator failed");
  return std::string(reinterpret_cast<char*>(bytes), sizeof bytes);
}

} // namespace af
