// The data plane (runtime/net/data_plane.hpp) and its frames
// (runtime/net/detail/data_frame.hpp): a frame's writer and reader on their own, then
// a node's data port spoken to over a real loopback socket, the way a peer
// (or an attacker) would: hellos with good and bad secrets, messages with
// tensors, answers to requests, and broken frames. Two actor systems in
// one process share a node id in CAF 0.17, so routes between nodes are
// tested with real node processes (tests/apps/multihost_test.sh).
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <future>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <caf/actor_registry.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/message.hpp>
#include <caf/message_id.hpp>

#include "actorflow/runtime/core/batch.hpp"
#include "actorflow/runtime/net/data_plane.hpp"
#include "actorflow/runtime/net/detail/data_frame.hpp"
#include "actorflow/runtime/net/detail/data_shm.hpp"
#include "actorflow/runtime/net/detail/data_stream.hpp"
#include "tests/support/harness.hpp"

using namespace af;
namespace frame = af::data_frame;

namespace {

// A batch with a tensor that travels in the payload (big) and one that
// stays in the descriptor (small).
std::vector<batch> sample_items() {
  batch b;
  b.seq = 7;
  b.epoch = 2;
  auto big = tensor::allocate(dtype::f32, {3, 1000});
  auto* f = big.mutable_data_as<float>();
  for (int i = 0; i < 3000; ++i)
    f[i] = static_cast<float>(i) * 0.5f;
  auto small = tensor::allocate(dtype::i64, {4});
  auto* l = small.mutable_data_as<int64_t>();
  for (int i = 0; i < 4; ++i)
    l[i] = 100 + i;
  b.set("x", big);
  b.set("label", small);
  return {b};
}

struct memory_source final : frame::source {
  std::vector<char> bytes;
  size_t at = 0;
  caf::error read(void* into, size_t n) override {
    if (bytes.size() - at < n)
      return caf::make_error(caf::sec::end_of_stream, "short");
    std::memcpy(into, bytes.data() + at, n);
    at += n;
    return caf::none;
  }
};

// The payload a writer kept aside, laid end to end.
std::vector<char> payload_of(const frame::writer& w) {
  std::vector<char> out;
  for (auto& b : w.blocks()) {
    auto* p = static_cast<const char*>(b.iov_base);
    out.insert(out.end(), p, p + b.iov_len);
  }
  return out;
}

// --- a peer on a raw socket -------------------------------------------------

struct raw_peer {
  int fd = -1;
  explicit raw_peer(uint16_t port) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr)
            == 0);
  }
  // On the abstract Unix socket `name` (without its leading NUL); fd is
  // -1 when nothing listens there.
  explicit raw_peer(const std::string& name) {
    fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    REQUIRE(name.size() + 1 <= sizeof addr.sun_path);
    std::memcpy(addr.sun_path + 1, name.data(), name.size());
    auto len =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ~raw_peer() {
    if (fd >= 0)
      ::close(fd);
  }
  void send_bytes(const void* p, size_t n) {
    REQUIRE(::send(fd, p, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n));
  }
  // In one send: a node that closes the connection after the header (a
  // message before the hello) must not make the rest of the frame fail
  // to send (a reset) before the test sees the close.
  void send_frame(const frame::header& h, const std::vector<char>& desc,
                  const std::vector<char>& payload = {}) {
    std::vector<char> bytes(frame::header_size);
    frame::encode(h, reinterpret_cast<std::byte*>(bytes.data()));
    bytes.insert(bytes.end(), desc.begin(), desc.end());
    bytes.insert(bytes.end(), payload.begin(), payload.end());
    send_bytes(bytes.data(), bytes.size());
  }
  void hello(caf::actor_system& sys, std::string secret, caf::node_id me) {
    std::vector<char> desc;
    caf::binary_serializer sink{sys, desc};
    REQUIRE(!sink(secret, me));
    frame::header h;
    h.type = frame::kind::hello;
    h.descriptor = static_cast<uint32_t>(desc.size());
    send_frame(h, desc);
  }
  // Reads exactly n bytes within 5 s; false on end of stream or timeout.
  bool read_bytes(void* p, size_t n) {
    auto* at = static_cast<char*>(p);
    size_t got = 0;
    while (got < n) {
      pollfd pfd{fd, POLLIN, 0};
      if (::poll(&pfd, 1, 5000) != 1)
        return false;
      auto r = ::recv(fd, at + got, n - got, 0);
      if (r <= 0)
        return false;
      got += static_cast<size_t>(r);
    }
    return true;
  }
  bool read_frame(frame::header& h, std::vector<char>& desc) {
    std::byte head[frame::header_size];
    if (!read_bytes(head, sizeof head))
      return false;
    REQUIRE(frame::decode(head, h).empty());
    desc.resize(h.descriptor);
    return read_bytes(desc.data(), desc.size());
  }
  // True once the node closed the connection (within 5 s), after whatever
  // it wrote before (a region answer).
  bool closed_by_peer() {
    char buf[256];
    for (;;) {
      pollfd pfd{fd, POLLIN, 0};
      if (::poll(&pfd, 1, 5000) != 1)
        return false;
      if (::recv(fd, buf, sizeof buf, 0) <= 0)
        return true;
    }
  }
};

// A message frame for actor `target` carrying `msg`.
void send_message(raw_peer& peer, caf::actor_system& sys, uint64_t target,
                  uint64_t sender, caf::message_id mid, caf::message msg) {
  frame::writer w{sys};
  REQUIRE(!msg.save(w));
  frame::header h;
  h.target = target;
  h.sender = sender;
  h.mid = mid.integer_value();
  h.descriptor = static_cast<uint32_t>(w.descriptor().size());
  h.payload = w.payload();
  peer.send_frame(h, w.descriptor(), payload_of(w));
}

// A shared message for actor `target` whose tensors are placed in `region`.
void send_shared(raw_peer& peer, caf::actor_system& sys, uint64_t target,
                 data_shm::outbound& region, caf::message msg,
                 std::vector<data_shm::block_ref>* placed = nullptr) {
  frame::writer w{sys};
  REQUIRE(!msg.save(w));
  std::vector<data_shm::block_ref> refs;
  REQUIRE(region.place(w.blocks(), refs));
  if (placed != nullptr)
    refs = *placed; // what the test makes of them
  std::vector<char> payload(refs.size() * data_shm::ref_size);
  for (size_t i = 0; i < refs.size(); ++i)
    data_shm::encode(refs[i], reinterpret_cast<std::byte*>(payload.data())
                                + i * data_shm::ref_size);
  frame::header h;
  h.type = frame::kind::shared_message;
  h.target = target;
  h.descriptor = static_cast<uint32_t>(w.descriptor().size());
  h.payload = payload.size();
  peer.send_frame(h, w.descriptor(), payload);
}

// A region frame of `bytes` to the node on the Unix socket of `peer`, with
// the memfd `fd` (none when -1), as a node hands over its region.
void hand_over(raw_peer& peer, int fd, uint64_t bytes) {
  std::byte head[frame::header_size];
  frame::header h;
  h.type = frame::kind::region;
  h.descriptor = data_shm::region_descriptor;
  frame::encode(h, head);
  std::byte size[data_shm::region_descriptor];
  data_shm::encode_region(bytes, size);
  std::vector<iovec> iov{iovec{head, sizeof head}, iovec{size, sizeof size}};
  auto io = detail::plain_stream(peer.fd, true);
  if (fd >= 0)
    REQUIRE(io->write_with_fd(iov, fd).empty());
  else
    REQUIRE(io->write_all(iov).empty());
}
void hand_over(raw_peer& peer, data_shm::outbound& region) {
  hand_over(peer, region.fd(), region.size());
}

caf::node_id other_node() {
  return caf::make_node_id(4242, "0123456789abcdef0123456789abcdef01234567")
    .value();
}

// Waits until `pred` holds, up to 5 s.
template <class Pred>
bool eventually(Pred pred) {
  for (int i = 0; i < 500; ++i) {
    if (pred())
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
  return pred();
}

struct node_fixture : test::fixture {
  std::shared_ptr<data_plane> plane;
  std::string secret = make_job_secret();
  std::promise<std::vector<batch>> got;
  caf::actor receiver;

  // With the middleman: the Unix socket is named for the node's id.
  explicit node_fixture(bool local_sockets = true) : test::fixture(true) {
    data_plane::options opts;
    opts.listen_host = "127.0.0.1";
    opts.local_sockets = local_sockets;
    opts.hello_timeout = std::chrono::milliseconds{500};
    plane = data_plane::start(sys, opts);
    plane->accept_secret(secret);
    // (An argument: CAF 0.17 trips UBSan on a function actor without one.)
    receiver = sys.spawn(
      [](caf::event_based_actor*,
         std::promise<std::vector<batch>>* promise) -> caf::behavior {
        return {
          [promise](std::vector<batch>& items) {
            promise->set_value(std::move(items));
          },
          [](uint64_t x) -> uint64_t { return x + 1; },
        };
      },
      &got);
    sys.registry().put(receiver.id(),
                       caf::actor_cast<caf::strong_actor_ptr>(receiver));
  }
  ~node_fixture() {
    caf::anon_send_exit(receiver, caf::exit_reason::user_shutdown);
    data_plane::stop(sys);
  }
  void welcomed(raw_peer& peer) {
    peer.hello(sys, secret, other_node());
    frame::header h;
    std::vector<char> desc;
    REQUIRE(peer.read_frame(h, desc));
    REQUIRE(h.type == frame::kind::welcome);
    caf::node_id them;
    caf::binary_deserializer in{sys, desc};
    REQUIRE(!in(them));
    CHECK(them == sys.node());
  }
  // Sends sample_items() to the receiver through `peer` (welcomed) and
  // checks that they arrive whole.
  void delivers_items(raw_peer& peer) {
    auto items = sample_items();
    send_message(peer, sys, receiver.id(), 0, caf::message_id{},
                 caf::make_message(items));
    arrives(items);
  }
  // What the receiver got, once it got it, checked against `items`.
  std::vector<batch> arrives(const std::vector<batch>& items) {
    auto fut = got.get_future();
    REQUIRE(fut.wait_for(std::chrono::seconds{5})
            == std::future_status::ready);
    auto arrived = fut.get();
    REQUIRE(arrived.size() == 1);
    CHECK(arrived[0].at("x") == items[0].at("x"));
    CHECK(arrived[0].at("label") == items[0].at("label"));
    return arrived;
  }
  bool nothing_delivered() {
    return got.get_future().wait_for(std::chrono::milliseconds{300})
           == std::future_status::timeout;
  }
};

// A node and a peer on its Unix socket, welcomed, that has read the
// region frame the node sends right after the welcome (`h`, `desc`), and a
// region of the peer's own, not handed over yet.
struct unix_peer_fixture : node_fixture {
  frame::header h;
  std::vector<char> desc;
  raw_peer peer{"actorflow-data/" + caf::to_string(sys.node())};
  std::unique_ptr<data_shm::outbound> region;
  unix_peer_fixture() {
    REQUIRE(peer.fd >= 0);
    welcomed(peer);
    REQUIRE(peer.read_frame(h, desc));
    REQUIRE(h.type == frame::kind::region);
    std::string why;
    region = data_shm::outbound::make(data_shm::min_region, why);
    REQUIRE(region);
  }
};

} // namespace

TEST_CASE("a frame's header round-trips and bad headers are named",
          "[data_plane]") {
  frame::header h;
  h.type = frame::kind::message;
  h.target = 11;
  h.sender = 22;
  h.mid = 33;
  h.descriptor = 44;
  h.payload = 55;
  std::byte raw[frame::header_size];
  frame::encode(h, raw);
  frame::header back;
  REQUIRE(frame::decode(raw, back).empty());
  CHECK(back.target == 11);
  CHECK(back.sender == 22);
  CHECK(back.mid == 33);
  CHECK(back.descriptor == 44);
  CHECK(back.payload == 55);

  auto bad = [&](auto change) {
    std::byte copy[frame::header_size];
    std::memcpy(copy, raw, sizeof copy);
    change(copy);
    frame::header out;
    return frame::decode(copy, out);
  };
  CHECK(bad([](std::byte* p) { p[0] = std::byte{'G'}; }).find("bad magic")
        == 0);
  CHECK(bad([](std::byte* p) { p[4] = std::byte{9}; }).find("version 9") == 0);
  CHECK(bad([](std::byte* p) { p[6] = std::byte{9}; })
        == "unknown frame kind 9");
  // A ping has no descriptor.
  CHECK(bad([](std::byte* p) { p[6] = std::byte{4}; }).find("descriptor of 44")
        == 0);
  CHECK(bad([](std::byte* p) { p[35] = std::byte{0x7f}; }).find("descriptor of")
        == 0);
  CHECK(bad([](std::byte* p) { p[47] = std::byte{0x7f}; }).find("payload of")
        == 0);
  // A hello may not carry a payload.
  CHECK(bad([](std::byte* p) {
          p[6] = std::byte{1};
          p[32] = std::byte{0};
        }).find("a control frame with a payload")
        == 0);
}

TEST_CASE("a frame's tensors travel outside the descriptor and come back "
          "whole",
          "[data_plane]") {
  test::fixture f;
  auto items = sample_items();
  auto msg = caf::make_message(items);
  frame::writer w{f.sys};
  REQUIRE(!msg.save(w));
  // The f32 tensor's 12,000 bytes are the payload, from its own buffer.
  REQUIRE(w.blocks().size() == 1);
  CHECK(w.blocks()[0].iov_base == items[0].at("x").data());
  CHECK(w.payload() == 12000);
  CHECK(w.descriptor().size() < 1000);

  memory_source src;
  src.bytes = payload_of(w);
  frame::reader r{f.sys, w.descriptor(), src, w.payload()};
  caf::message back;
  REQUIRE(!back.load(r));
  CHECK(r.leftover().empty());
  REQUIRE(back.match_elements<std::vector<batch>>());
  auto& got = back.get_as<std::vector<batch>>(0);
  REQUIRE(got.size() == 1);
  CHECK(got[0].seq == 7);
  CHECK(got[0].at("x") == items[0].at("x"));
  CHECK(got[0].at("label") == items[0].at("label"));
  // Read straight into a fresh, aligned buffer of its own.
  CHECK(got[0].at("x").data() != items[0].at("x").data());
  CHECK(reinterpret_cast<uintptr_t>(got[0].at("x").data()) % 64 == 0);

  SECTION("a payload cut short is an error, not a tensor") {
    src.bytes.resize(src.bytes.size() - 1);
    src.at = 0;
    frame::reader cut{f.sys, w.descriptor(), src, w.payload()};
    caf::message none;
    CHECK(none.load(cut));
  }
  SECTION("a header that promises less payload than the tensor needs") {
    src.at = 0;
    frame::reader less{f.sys, w.descriptor(), src, w.payload() - 8};
    caf::message none;
    CHECK(none.load(less));
  }
  SECTION("a header that promises more payload than is read is noticed") {
    src.at = 0;
    frame::reader more{f.sys, w.descriptor(), src, w.payload() + 8};
    caf::message m;
    REQUIRE(!m.load(more));
    CHECK(more.leftover() == "8 bytes of the payload were not read");
  }
}

TEST_CASE("a node's data port delivers a hello'd peer's tensors to the "
          "actor named",
          "[data_plane]") {
  node_fixture f;
  REQUIRE(f.plane->port() != 0);
  raw_peer peer{f.plane->port()};
  f.welcomed(peer);
  f.delivers_items(peer);
  CHECK(eventually([&] { return f.plane->stats().frames_received == 1; }));
  CHECK(f.plane->stats().accepted == 1);
}

TEST_CASE("a peer in the node's network namespace reaches its data plane "
          "on a Unix socket named for the node",
          "[data_plane]") {
  std::string name;
  SECTION("tensors arrive as over TCP, and the hello is still required") {
    node_fixture f;
    name = "actorflow-data/" + caf::to_string(f.sys.node());
    raw_peer stranger{name};
    REQUIRE(stranger.fd >= 0);
    stranger.hello(f.sys, "not the secret", other_node());
    CHECK(stranger.closed_by_peer());
    CHECK(eventually([&] { return f.plane->stats().refused == 1; }));
    raw_peer peer{name};
    REQUIRE(peer.fd >= 0);
    f.welcomed(peer);
    f.delivers_items(peer);
    CHECK(f.plane->stats().accepted == 1);
  }
  SECTION("local_sockets = false: no Unix socket, the data port only") {
    node_fixture f{false};
    name = "actorflow-data/" + caf::to_string(f.sys.node());
    raw_peer peer{name};
    CHECK(peer.fd == -1);
    raw_peer tcp{f.plane->port()};
    f.welcomed(tcp);
  }
  SECTION("the socket goes with the plane") {
    {
      node_fixture f;
      name = "actorflow-data/" + caf::to_string(f.sys.node());
      raw_peer peer{name};
      CHECK(peer.fd >= 0);
    }
    raw_peer peer{name};
    CHECK(peer.fd == -1);
  }
}

TEST_CASE("a peer on the Unix socket sends tensors through memory it "
          "shares, and the node reads them in place",
          "[data_plane]") {
  unix_peer_fixture f;
  REQUIRE(f.desc.size() == data_shm::region_descriptor);
  CHECK(data_shm::decode_region(reinterpret_cast<std::byte*>(f.desc.data()))
        == (size_t{64} << 20));
  auto items = sample_items();
  auto msg = caf::make_message(items);
  bool refused = true; // the sections below but the first
  SECTION("tensors arrive whole, over the peer's blocks until they go") {
    refused = false;
    hand_over(f.peer, *f.region);
    // The node says that it mapped the region.
    REQUIRE(f.peer.read_frame(f.h, f.desc));
    CHECK(f.h.type == frame::kind::region_answer);
    CHECK(f.h.mid == 1);
    send_shared(f.peer, f.sys, f.receiver.id(), *f.region, msg);
    auto arrived = f.arrives(items);
    CHECK(f.plane->stats().regions == 1);
    // The 12,000 bytes of x are the peer's block while the tensor lives.
    CHECK(f.region->held() >= 12000);
    arrived.clear();
    CHECK(eventually([&] { return f.region->held() == 0; }));
    CHECK(f.plane->stats().broken == 0);
  }
  SECTION("a shared message before any region") {
    send_shared(f.peer, f.sys, f.receiver.id(), *f.region, msg);
  }
  SECTION("a second region") {
    hand_over(f.peer, *f.region);
    hand_over(f.peer, *f.region);
  }
  SECTION("a file descriptor with a frame that is not a region") {
    auto io = detail::plain_stream(f.peer.fd, true);
    std::byte head[frame::header_size];
    frame::header ping;
    ping.type = frame::kind::ping;
    frame::encode(ping, head);
    REQUIRE(io->write_with_fd({iovec{head, sizeof head}}, f.region->fd())
              .empty());
  }
  SECTION("a reference outside the region") {
    hand_over(f.peer, *f.region);
    std::vector<data_shm::block_ref> bad{{f.region->size(), 12000}};
    send_shared(f.peer, f.sys, f.receiver.id(), *f.region, msg, &bad);
  }
  SECTION("the same block twice") {
    hand_over(f.peer, *f.region);
    // Two tensors of 12,000 bytes, both named by the first one's block.
    auto two = caf::make_message(items, items);
    frame::writer w{f.sys};
    REQUIRE(!two.save(w));
    std::vector<data_shm::block_ref> refs;
    REQUIRE(f.region->place(w.blocks(), refs));
    REQUIRE(refs.size() == 2);
    std::vector<data_shm::block_ref> twice{refs[0], refs[0]};
    send_shared(f.peer, f.sys, f.receiver.id(), *f.region, two, &twice);
  }
  if (refused) {
    CHECK(f.peer.closed_by_peer());
    CHECK(f.nothing_delivered());
    CHECK(eventually([&] { return f.plane->stats().broken == 1; }));
  }
}

TEST_CASE("a region the node cannot use is refused, and the tensors come "
          "through the socket",
          "[data_plane]") {
  unix_peer_fixture f;
  SECTION("no memfd came with it") {
    hand_over(f.peer, -1, f.region->size());
  }
  SECTION("a memfd that can still shrink") {
    int fd = ::memfd_create("test", MFD_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, data_shm::min_region) == 0);
    hand_over(f.peer, fd, data_shm::min_region);
    ::close(fd);
  }
  REQUIRE(f.peer.read_frame(f.h, f.desc));
  CHECK(f.h.type == frame::kind::region_answer);
  CHECK(f.h.mid == 0);
  CHECK(f.plane->stats().regions == 0);
  // The connection goes on, the tensors in the frames.
  f.delivers_items(f.peer);
  CHECK(f.plane->stats().broken == 0);
}

TEST_CASE("a request through the data port is answered on the same "
          "connection",
          "[data_plane]") {
  node_fixture f;
  raw_peer peer{f.plane->port()};
  f.welcomed(peer);
  // A request id as CAF makes them (a normal-priority request, id 77): the
  // answer carries its response id.
  auto mid = caf::make_message_id(77);
  REQUIRE(mid.is_request());
  send_message(peer, f.sys, f.receiver.id(), 999, mid,
               caf::make_message(uint64_t{41}));
  frame::header h;
  std::vector<char> desc;
  REQUIRE(peer.read_frame(h, desc));
  CHECK(h.type == frame::kind::message);
  CHECK(h.target == 999);
  CHECK(h.sender == f.receiver.id());
  CHECK(caf::message_id{h.mid} == mid.response_id());
  memory_source none;
  frame::reader r{f.sys, desc, none, h.payload};
  caf::message answer;
  REQUIRE(!answer.load(r));
  REQUIRE(answer.match_elements<uint64_t>());
  CHECK(answer.get_as<uint64_t>(0) == 42);

  SECTION("a request for an actor that is not there bounces at once") {
    send_message(peer, f.sys, 123456789, 999, mid,
                 caf::make_message(uint64_t{1}));
    REQUIRE(peer.read_frame(h, desc));
    frame::reader e{f.sys, desc, none, h.payload};
    caf::message err;
    REQUIRE(!err.load(e));
    REQUIRE(err.match_elements<caf::error>());
    CHECK(err.get_as<caf::error>(0) == caf::sec::request_receiver_down);
    CHECK(f.plane->stats().undeliverable == 1);
  }
}

TEST_CASE("a node's data port closes connections that do not belong to a "
          "job",
          "[data_plane]") {
  node_fixture f;
  SECTION("a wrong secret") {
    raw_peer peer{f.plane->port()};
    peer.hello(f.sys, make_job_secret(), other_node());
    CHECK(peer.closed_by_peer());
  }
  SECTION("garbage instead of a hello") {
    raw_peer peer{f.plane->port()};
    std::string junk(64, 'G');
    peer.send_bytes(junk.data(), junk.size());
    CHECK(peer.closed_by_peer());
  }
  SECTION("a port scan: connect and say nothing") {
    raw_peer peer{f.plane->port()};
    CHECK(peer.closed_by_peer()); // after hello_timeout (0.5 s here)
  }
  SECTION("a message before the hello") {
    raw_peer peer{f.plane->port()};
    send_message(peer, f.sys, f.receiver.id(), 0, caf::message_id{},
                 caf::make_message(sample_items()));
    CHECK(peer.closed_by_peer());
    CHECK(f.nothing_delivered());
  }
  CHECK(eventually([&] { return f.plane->stats().refused == 1; }));
  CHECK(f.plane->stats().accepted == 0);
}

TEST_CASE("a broken frame delivers nothing and closes the connection",
          "[data_plane]") {
  node_fixture f;
  raw_peer peer{f.plane->port()};
  f.welcomed(peer);
  frame::writer w{f.sys};
  auto msg = caf::make_message(sample_items());
  REQUIRE(!msg.save(w));
  frame::header h;
  h.target = f.receiver.id();
  h.descriptor = static_cast<uint32_t>(w.descriptor().size());
  h.payload = w.payload();
  auto payload = payload_of(w);
  SECTION("the connection ends inside the payload") {
    payload.resize(payload.size() / 2);
    peer.send_frame(h, w.descriptor(), payload);
    ::shutdown(peer.fd, SHUT_WR);
  }
  SECTION("the header claims a payload the descriptor does not use") {
    h.payload += 4096;
    payload.resize(payload.size() + 4096);
    peer.send_frame(h, w.descriptor(), payload);
  }
  SECTION("an oversize length") {
    h.payload = frame::max_payload + 1;
    peer.send_frame(h, w.descriptor());
  }
  SECTION("garbage for a descriptor") {
    std::vector<char> junk(h.descriptor, '\x7f');
    peer.send_frame(h, junk, payload);
  }
  CHECK(peer.closed_by_peer());
  CHECK(f.nothing_delivered());
  CHECK(eventually([&] { return f.plane->stats().broken == 1; }));
  CHECK(f.plane->stats().frames_received == 0);
}

TEST_CASE("floats in a frame keep their bits, infinities and NaN too",
          "[data_plane]") {
  // CAF 0.17's own float encoding (pack754) never ends on an infinity.
  test::fixture f;
  auto inf = std::numeric_limits<double>::infinity();
  auto nan = std::numeric_limits<float>::quiet_NaN();
  auto msg = caf::make_message(inf, -inf, nan, 1.5f, -0.0);
  frame::writer w{f.sys};
  REQUIRE(!msg.save(w));
  memory_source none;
  frame::reader r{f.sys, w.descriptor(), none, w.payload()};
  caf::message back;
  REQUIRE(!back.load(r));
  CHECK(r.leftover().empty());
  REQUIRE(back.match_elements<double, double, float, float, double>());
  CHECK(back.get_as<double>(0) == inf);
  CHECK(back.get_as<double>(1) == -inf);
  CHECK(std::isnan(back.get_as<float>(2)));
  CHECK(back.get_as<float>(3) == 1.5f);
  CHECK(std::signbit(back.get_as<double>(4)));
}
