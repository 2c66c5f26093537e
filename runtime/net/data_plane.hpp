// The data plane: messages between actors on two nodes go straight from the
// sending node to the receiving one, on a connection per pair of processes
// (TCP; a Unix socket between processes in the same network namespace,
// with tensors in memory both processes map),
// instead of through CAF 0.17's BASP, which relays every
// message between two nodes through the node that connected them (the
// coordinator's) and copies a tensor's bytes about 8 times on the way
// (docs/multi-host.md, "The data plane").
//
// How a message uses it: `route(remote)` gives a local stand-in for a
// remote actor (a caf::actor_proxy, like CAF's own proxies) whose enqueue
// writes the message as a frame (runtime/net/detail/data_frame.hpp) on the connection
// to the actor's node. There the connection's reader thread rebuilds the
// message, tensors straight into pooled buffers, and enqueues it to the
// actor, its sender being the stand-in of the sending actor on that
// connection: answers to requests travel back the same way, and monitoring
// that stand-in tells the receiver when the connection (and so, for it,
// the sender's node) is lost. Per-sender order holds: one sender's frames
// to one node go on one connection, read by one thread.
//
// Between processes on one Unix socket, the tensors' bytes go through
// memory the two share instead (runtime/net/detail/data_shm.hpp): the sender copies
// them once into its region, the frame names where, and the receiver's
// tensors are those bytes in place.
//
// Who uses it: stage replicas for the items, markers and credit of an
// edge to a replica on another node (runtime/stage/detail/stage_output.cpp), and PS
// clients for every request to a shard on another node
// (runtime/ps/ps_client.*). A message the data plane cannot carry (no route
// to the node, the connection cannot be made) goes through CAF as before.
//
// Trust: a node's data port binds where its CAF port binds. A connection
// must open with a hello that carries a secret the node was given by a
// coordinator over the control channel (job::start makes one per job), or
// it is closed: see accept_secret. Every connection closed for a bad
// frame or a bad hello is logged with the peer's address and counted
// (data_plane_stats). When the actor system has CAF's OpenSSL module
// (--tls-*), every connection is TLS with the same certificate, key and CA
// file and the same mutual check as CAF's, before the hello: there is no
// plaintext side channel.
//
// Failure: a connection that breaks (its peer died, the link was cut)
// kills its stand-ins, as CAF kills the proxies of a lost node: monitors
// see them go down, requests waiting for an answer through it are answered
// with caf::sec::request_receiver_down, and a message sent to a dead
// stand-in is dropped (a request bounces). The next route() dials again;
// a node it cannot reach falls back to CAF, with a warning naming it.
// Stage replicas monitor the stand-ins of their peers, so a broken
// connection ends their edges as a lost node would (runtime/stage/detail/stage_actor.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/node_id.hpp>

namespace af {

class buffer; // runtime/core/tensor.hpp

/// Where a node's data port is, and the secret that opens it.
struct data_route {
  caf::node_id node;
  std::string name; // the topology's host name, for messages
  std::string host;
  uint16_t port = 0;
  std::string secret;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, data_route& x) {
  return f(caf::meta::type_name("af::data_route"), x.node, x.name, x.host,
           x.port, x.secret);
}

struct data_plane_stats {
  uint64_t accepted = 0; // connections accepted with a good hello
  uint64_t dialed = 0;   // connections this process opened
  uint64_t refused = 0;  // connections closed for a bad hello
  uint64_t broken = 0;   // connections closed for a bad frame
  uint64_t frames_sent = 0;
  uint64_t frames_received = 0;
  uint64_t bytes_sent = 0; // headers, descriptors and payloads
  uint64_t bytes_received = 0;
  uint64_t undeliverable = 0; // frames for an actor that is not here
  uint64_t local = 0; // of `dialed`, those over a Unix socket
  // Shared memory (options::shared_memory): regions of peers mapped, tensor
  // bytes this process sent through its own regions, and messages whose
  // tensors went through the socket because the region was full.
  uint64_t regions = 0;
  uint64_t bytes_shared = 0;
  uint64_t region_full = 0;
};

class data_plane {
public:
  struct options {
    /// Where to accept connections; empty: this process only dials out
    /// (a coordinator's).
    std::string listen_host;
    uint16_t port = 0; // 0: any free port
    /// How long a dial (connect, hello, welcome) may take.
    std::chrono::milliseconds dial_timeout{3000};
    /// How long an accepted connection may take to say hello (and make
    /// the TLS handshake before it).
    std::chrono::milliseconds hello_timeout{5000};
    /// Peers in the same network namespace on this machine connect over a
    /// Unix socket (in the abstract namespace, named for the node) instead
    /// of loopback TCP: this one listens on one beside its port, and dials
    /// a peer's first, taking it only when it belongs to the peer's
    /// process (SO_PEERCRED). false: TCP only.
    bool local_sockets = true;
    /// On a Unix socket without TLS, each side sends tensors through a
    /// region of this many bytes of memory it shares with the peer (a
    /// memfd): copied once into it, and taken in place by the receiver,
    /// instead of copied twice by the kernel (runtime/net/detail/data_shm.hpp). A
    /// message whose tensors find no room there goes through the socket.
    /// 0: none.
    size_t shared_memory = size_t{64} << 20;
  };

  /// The data plane of `sys`, started with `opts` if it has none yet (an
  /// existing one is returned as it is); TLS when `sys` has CAF's OpenSSL
  /// module, with the files it was given. Throws std::runtime_error when
  /// it cannot listen or a TLS file does not load. Call stop(sys) before
  /// `sys` is destroyed.
  static std::shared_ptr<data_plane> start(caf::actor_system& sys,
                                           const options& opts);
  /// The data plane of `sys`, or nullptr.
  static std::shared_ptr<data_plane> of(caf::actor_system& sys);
  /// Closes every connection (their stand-ins go down) and joins the
  /// threads. Does nothing when `sys` has no data plane. Bounded: every
  /// socket is shut down first, so no thread waits for a peer.
  static void stop(caf::actor_system& sys);
  /// route(remote) on the data plane of `sys`, or `remote` itself when
  /// `sys` has none.
  static caf::actor route(caf::actor_system& sys, const caf::actor& remote);

  /// The port it accepts on; 0 when it only dials.
  virtual uint16_t port() const = 0;
  /// Accept hellos that carry `secret` from now on.
  virtual void accept_secret(const std::string& secret) = 0;
  /// Learn (or update) where nodes' data ports are.
  virtual void add_routes(const std::vector<data_route>& routes) = 0;
  /// Dials `r` now if no connection to its node is open; "" or why not
  /// ("cannot connect to 127.0.0.1:4300: Connection refused").
  virtual std::string probe(const data_route& r) = 0;
  /// A local stand-in for `remote` on the connection to its node (dialed on
  /// first use), or `remote` itself: when it is local or null, when no
  /// route to its node is known, or when the node cannot be reached now.
  virtual caf::actor route(const caf::actor& remote) = 0;
  /// A buffer of `bytes` in the memory this process shares with the node
  /// of `remote` (`--data-shm`), for a tensor that is then sent there:
  /// the data plane sends it without copying it (the first time it is
  /// sent). nullptr when there is none: `remote` is local, the connection
  /// to its node has no shared memory, the region has no room now, or
  /// `bytes` is below what travels outside the message's descriptor.
  virtual std::shared_ptr<buffer> shared_buffer(const caf::actor& remote,
                                                size_t bytes) = 0;
  /// shared_buffer on the data plane of `sys`; nullptr when it has none.
  static std::shared_ptr<buffer>
  shared_buffer(caf::actor_system& sys, const caf::actor& remote, size_t bytes);
  /// Calls `done` (on some thread, once) when every message that `node`
  /// wrote to this process on the data plane before now has been
  /// delivered: each open connection to it is pinged, and answers in order
  /// after what the node wrote before. At once when there is none. A
  /// receiver told by CAF that a remote sender went down drains first, so
  /// that the sender's last messages, sent on the data plane, are not
  /// overtaken by its down message, which CAF sends its own way.
  virtual void drain(const caf::node_id& node, std::function<void()> done) = 0;
  virtual data_plane_stats stats() const = 0;

  virtual ~data_plane() = default;
};

/// A new job secret: 32 random bytes from OpenSSL's generator.
std::string make_job_secret();

} // namespace af
