// Internal to the data plane (runtime/net/data_plane.hpp), not installed: a
// connection to one peer process with its reader thread and the stand-ins
// (runtime/net/detail/data_connection.cpp), and the plane that listens, dials, keeps
// the routes and drains (runtime/net/data_plane.cpp). The bytes go through a
// stream (runtime/net/detail/data_stream.hpp): TCP, a Unix socket, or TLS on either.
#pragma once

#include <atomic>
#include <cerrno>
#include <cstddef>
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
#include <sys/un.h>
#include <unistd.h>

#include <caf/actor_config.hpp>
#include <caf/actor_proxy.hpp>
#include <caf/actor_registry.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
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

#include "actorflow/runtime/net/data_plane.hpp"
#include "actorflow/runtime/net/detail/data_frame.hpp"
#include "actorflow/runtime/net/detail/data_shm.hpp"
#include "actorflow/runtime/net/detail/data_stream.hpp"
#include "actorflow/runtime/testing/failpoint.hpp"

namespace af::detail {

using clock_type = std::chrono::steady_clock;

struct stream_source final : data_frame::source {
  stream& in;
  explicit stream_source(stream& s) : in(s) {}
  caf::error read(void* into, size_t n) override {
    auto why = in.read_exact(into, n);
    if (why.empty())
      return caf::none;
    return caf::make_error(caf::sec::end_of_stream, why);
  }
};

// The raw blocks of a shared message: a reference per block in the
// stream, the bytes in the peer's region.
struct shm_source final : data_frame::source {
  stream& in;
  data_shm::inbound& region;
  shm_source(stream& s, data_shm::inbound& r) : in(s), region(r) {}
  uint64_t cost(size_t) const override { return data_shm::ref_size; }
  uint64_t max_block() const override { return region.size(); }
  caf::error read(void* into, size_t n) override {
    data_shm::block_ref r;
    if (auto why = next(r); !why.empty())
      return caf::make_error(caf::sec::end_of_stream, why);
    if (auto why = region.copy_out(r, into, n); !why.empty())
      return caf::make_error(caf::sec::invalid_argument, why);
    return caf::none;
  }
  std::shared_ptr<const buffer> adopt(size_t n, caf::error& err) override {
    data_shm::block_ref r;
    if (auto why = next(r); !why.empty()) {
      err = caf::make_error(caf::sec::end_of_stream, why);
      return nullptr;
    }
    std::string why;
    auto buf = region.adopt(r, n, why);
    if (!buf)
      err = caf::make_error(caf::sec::invalid_argument, why);
    return buf;
  }

private:
  std::string next(data_shm::block_ref& r) {
    std::byte raw[data_shm::ref_size];
    auto why = in.read_exact(raw, sizeof raw);
    if (why.empty())
      r = data_shm::decode_ref(raw);
    return why;
  }
};

class plane_impl;

class connection : public std::enable_shared_from_this<connection> {
public:
  // `fd` is a connected socket, now the connection's. `io` is its stream
  // when the handshakes are made already (dialed); an accepted
  // connection makes its own in its reader thread (TLS's, then the hello).
  connection(plane_impl& plane, int fd, bool unix_socket, std::string name,
             bool dialed, std::unique_ptr<stream> io = nullptr)
    : plane_(plane), fd_(fd), unix_(unix_socket), name_(std::move(name)),
      dialed_(dialed), io_(std::move(io)) {}
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

  // A buffer in the memory shared with the peer for a tensor sent here
  // next (data_plane::shared_buffer), or nullptr.
  std::shared_ptr<buffer> shared_buffer(size_t bytes) {
    if (bytes < data_frame::bulk_bytes
        || !shm_ready_.load(std::memory_order_acquire))
      return nullptr;
    return data_shm::outbound::allocate(shm_out_, bytes);
  }
  // On a plain Unix socket, once, by the thread that made the handshake,
  // before any message: makes the region this side sends tensors through
  // and hands it to the peer. "" (also when there is none to make) or why
  // the peer cannot be told.
  std::string offer_region();
  // "a Unix socket with shared memory", "TLS over TCP", ...: for log lines.
  std::string how() const {
    return io_->kind() + (shm_out_ ? " with shared memory" : "");
  }

  void start(bool hello_first);
  // Wakes the reader: it closes the connection.
  void shut() { ::shutdown(fd_, SHUT_RDWR); }
  // The stream: set before the reader starts (dialed), or by the reader
  // before the connection is welcomed and written to (accepted).
  stream& io() { return *io_; }
  void join() {
    if (reader_.joinable())
      reader_.join();
  }

private:
  void run(bool hello_first);
  std::string take_hello();
  std::string secure(); // TLS on an accepted connection, when the plane has it
  std::string read_frames();
  std::string deliver(const data_frame::header& h,
                      const std::vector<char>& descriptor);
  // A region frame: maps the peer's region and answers; "" or why the
  // connection must close.
  std::string map_region(const std::vector<char>& descriptor);
  // The peer's answer to this side's region.
  std::string region_answered(bool mapped);
  caf::strong_actor_ptr local(caf::actor_id aid);
  void close();

  plane_impl& plane_;
  int fd_;
  bool unix_;
  std::string name_;
  bool dialed_;
  std::unique_ptr<stream> io_;
  std::shared_ptr<data_shm::outbound> shm_out_; // what this side sends
  std::shared_ptr<data_shm::inbound> shm_in_;   // what the peer sends
  std::atomic<bool> told_full_{false}; // logged that a message did not fit
  std::atomic<bool> shm_ready_{false}; // the peer mapped shm_out_
  bool region_seen_ = false;           // the reader's: the peer's came
  bool region_answered_ = false;       // the reader's: the answer to ours
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
  // TLS for every connection from now on (before listen() and dials).
  void use_tls(std::shared_ptr<tls_context> tls) { tls_ = std::move(tls); }
  tls_context* tls() const { return tls_.get(); }

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
  std::shared_ptr<buffer> shared_buffer(const caf::actor& remote,
                                        size_t bytes) override {
    if (!remote || remote.node() == sys_.node())
      return nullptr;
    auto c = link_to(remote.node(), nullptr);
    return c ? c->shared_buffer(bytes) : nullptr;
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
    s.local = local.load();
    s.regions = regions.load();
    s.bytes_shared = bytes_shared.load();
    s.region_full = region_full.load();
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
    undeliverable{0}, local{0}, regions{0}, bytes_shared{0}, region_full{0};

private:
  std::shared_ptr<connection> link_to(const caf::node_id& node,
                                      std::string* why);
  std::shared_ptr<connection> dial(const data_route& r, std::string& why);
  // A socket connected to `r`: on this machine's Unix socket of its node
  // when there is one (`unix_socket` set), else over TCP; -1 and `why`.
  int connect_to(const data_route& r, bool& unix_socket, std::string& why);
  int connect_unix(const caf::node_id& node);
  int connect_tcp(const data_route& r, std::string& why);
  void listen_unix();
  void accept_loop();
  void accept_one(int listener, bool unix_socket);

  caf::actor_system& sys_;
  options opts_;
  int listen_fd_ = -1;
  int unix_fd_ = -1;       // the Unix socket it accepts on, or -1
  int wake_[2] = {-1, -1}; // a pipe: stop() wakes the acceptor through it
  uint16_t port_ = 0;
  std::shared_ptr<tls_context> tls_;
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

} // namespace af::detail
