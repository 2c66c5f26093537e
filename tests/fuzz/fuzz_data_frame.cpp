// libFuzzer target: a data-plane frame (runtime/net/detail/data_frame.hpp) as a
// node's reader thread takes it from a peer that passed the hello: the
// 48-byte header, then the descriptor, then the payload, from arbitrary
// bytes. A header must parse or be refused with a reason; a message frame
// must load into a caf::message or fail (an error, or an exception the
// node's reader catches), never crash or allocate what the bytes do not
// back; and a frame that loads with nothing left over must write back to
// the same payload size and load again.
//
// A shared message (its payload block references into the sender's
// shared memory, runtime/net/detail/data_shm.hpp) loads against a fresh region in
// which four blocks were handed over: a reference that names anything else
// must be refused, never read.
//
// AF_FUZZ_WRITE_SEEDS=DIR: writes frames of real messages (items of an
// edge, a PS push and pull answer, an error) to DIR and exits
// (tests/fuzz/corpus/README.md).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/message.hpp>
#include <caf/sec.hpp>

#include "actorflow/runtime/core/batch.hpp"
#include "actorflow/runtime/net/detail/data_frame.hpp"
#include "actorflow/runtime/net/detail/data_plane_impl.hpp"
#include "actorflow/runtime/net/detail/data_shm.hpp"
#include "actorflow/runtime/net/system.hpp"
#include "actorflow/runtime/protocol/ps.hpp"
#include "tests/fuzz/fuzz_util.hpp"

namespace frame = af::data_frame;

namespace {

// One actor system for the process, never destroyed: libFuzzer ends the
// process from inside a run, where ~actor_system would join threads that
// are gone.
caf::actor_system& sys() {
  static auto* s = [] {
    auto* cfg = new caf::actor_system_config;
    af::add_message_types(*cfg);
    af::apply(af::engine_options{1, "sharing"}, *cfg);
    return new caf::actor_system{*cfg};
  }();
  return *s;
}

struct bytes_source final : frame::source {
  const uint8_t* p;
  size_t left;
  caf::error read(void* into, size_t n) override {
    if (n > left)
      return caf::make_error(caf::sec::end_of_stream, "short");
    std::memcpy(into, p, n);
    p += n;
    left -= n;
    return caf::none;
  }
};

// The frame of `msg` as a node writes it: header, descriptor, payload.
std::string frame_of(caf::message msg) {
  frame::writer w{sys()};
  if (msg.save(w))
    std::abort();
  frame::header h;
  h.target = 5;
  h.sender = 7;
  h.descriptor = static_cast<uint32_t>(w.descriptor().size());
  h.payload = w.payload();
  std::string out(frame::header_size, '\0');
  frame::encode(h, reinterpret_cast<std::byte*>(out.data()));
  out.append(w.descriptor().data(), w.descriptor().size());
  for (auto& b : w.blocks())
    out.append(static_cast<const char*>(b.iov_base), b.iov_len);
  return out;
}

void write_seeds(const std::string& dir) {
  af::batch b;
  b.seq = 3;
  auto x = af::tensor::allocate(af::dtype::f32, {2, 1024});
  for (int i = 0; i < 2048; ++i)
    x.mutable_data_as<float>()[i] = static_cast<float>(i);
  auto y = af::tensor::allocate(af::dtype::i64, {2});
  y.mutable_data_as<int64_t>()[0] = 1;
  y.mutable_data_as<int64_t>()[1] = 0;
  b.set("x", x);
  b.set("label", y);
  af::fuzz::write_file(dir + "/items",
                       frame_of(caf::make_message(std::vector<af::batch>{b})));
  af::ps_push push;
  push.worker = 1;
  push.step = 9;
  push.samples = 64;
  af::ps_slice g;
  g.values = x;
  push.grads.push_back(g);
  af::fuzz::write_file(
    dir + "/push", frame_of(caf::make_message(af::ps_push_atom::value, push)));
  af::ps_params params;
  params.version = 4;
  params.slices.push_back(g);
  af::fuzz::write_file(dir + "/params", frame_of(caf::make_message(params)));
  // A push with the next pull (ps_step), and its answer.
  af::ps_pull pull;
  pull.worker = 1;
  pull.clock = 9;
  af::fuzz::write_file(dir + "/step",
                       frame_of(caf::make_message(af::ps_step_atom::value,
                                                  push, pull)));
  af::fuzz::write_file(
    dir + "/stepped",
    frame_of(caf::make_message(af::ps_push_ack{true, 2, 4}, params)));
  af::fuzz::write_file(dir + "/error",
                       frame_of(caf::make_message(
                         caf::make_error(caf::sec::request_receiver_down))));
  // The items again as a shared message: x's block is the first of the
  // region the target hands over (region_blocks).
  auto items = frame_of(caf::make_message(std::vector<af::batch>{b}));
  frame::header h;
  frame::decode(reinterpret_cast<const std::byte*>(items.data()), h);
  h.type = frame::kind::shared_message;
  h.payload = af::data_shm::ref_size;
  std::string shared(frame::header_size, '\0');
  frame::encode(h, reinterpret_cast<std::byte*>(shared.data()));
  shared.append(items, frame::header_size, h.descriptor);
  std::byte ref[af::data_shm::ref_size];
  af::data_shm::encode({2 * af::data_shm::align, 8192}, ref);
  shared.append(reinterpret_cast<const char*>(ref), sizeof ref);
  af::fuzz::write_file(dir + "/shared_items", shared);
}

// A fresh region with blocks of 8192, 4096, 16 and 65536 bytes handed
// over, mapped as a receiver maps it.
struct region_blocks {
  std::unique_ptr<af::data_shm::outbound> out;
  std::shared_ptr<af::data_shm::inbound> in;
  region_blocks() {
    std::string why;
    out = af::data_shm::outbound::make(af::data_shm::min_region, why);
    if (!out)
      std::abort();
    static std::vector<char> bytes(65536, '\x11');
    std::vector<iovec> blocks{{bytes.data(), 8192},
                              {bytes.data(), 4096},
                              {bytes.data(), 16},
                              {bytes.data(), 65536}};
    std::vector<af::data_shm::block_ref> refs;
    if (!out->place(blocks, refs))
      std::abort();
    in = af::data_shm::inbound::map(::dup(out->fd()), out->size(), why);
    if (!in)
      std::abort();
  }
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bool seeded = [] {
    if (const char* dir = std::getenv("AF_FUZZ_WRITE_SEEDS")) {
      write_seeds(dir);
      std::_Exit(0);
    }
    return true;
  }();
  (void)seeded;
  if (size < frame::header_size)
    return 0;
  frame::header h;
  auto why = frame::decode(reinterpret_cast<const std::byte*>(data), h);
  bool shared = h.type == frame::kind::shared_message;
  if (!why.empty() || (h.type != frame::kind::message && !shared))
    return 0;
  data += frame::header_size;
  size -= frame::header_size;
  if (h.descriptor > size || h.payload > size - h.descriptor)
    return 0; // the connection would end inside the frame: nothing read
  // (A node trusts a peer that showed the job's secret with the payload
  // the header announces, up to max_payload; here every announced byte
  // is present, so a tensor may not allocate more than the input holds.)
  std::vector<char> desc(data, data + h.descriptor);
  bytes_source payload;
  payload.p = data + h.descriptor;
  payload.left = size - h.descriptor;
  // The references of a shared message come from the stream, as the
  // node's reader takes them.
  std::optional<region_blocks> region;
  std::unique_ptr<af::detail::stream> refs_stream;
  std::optional<af::detail::shm_source> refs;
  int pipe_fds[2] = {-1, -1};
  if (shared) {
    region.emplace();
    // The payload's bytes behind a socket, as on a connection.
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, pipe_fds) != 0)
      std::abort();
    auto n = std::min<size_t>(payload.left, 60000); // fits its buffer
    if (n > 0 && ::write(pipe_fds[1], payload.p, n) != static_cast<ssize_t>(n))
      std::abort();
    ::close(pipe_fds[1]);
    refs_stream = af::detail::plain_stream(pipe_fds[0], false);
    refs.emplace(*refs_stream, *region->in);
  }
  frame::source& from =
    shared ? static_cast<frame::source&>(*refs) : payload;
  frame::reader in{sys(), desc, from, h.payload};
  struct closer {
    int fd;
    ~closer() {
      if (fd >= 0)
        ::close(fd);
    }
  } close_pipe{pipe_fds[0]};
  caf::message msg;
  // Refused (the node closes the connection): an error, an exception
  // (CAF's own config_value throws on a bad variant index), or bytes left.
  try {
    if (msg.load(in) || !in.leftover().empty())
      return 0;
  } catch (const std::exception&) {
    return 0;
  }
  // Delivered: it writes back to the same payload (for a shared message:
  // a reference per raw block) and loads again.
  frame::writer w{sys()};
  if (msg.save(w))
    __builtin_trap();
  if (shared ? w.blocks().size() * af::data_shm::ref_size != h.payload
             : w.payload() != h.payload)
    __builtin_trap();
  std::vector<char> again_payload;
  for (auto& b : w.blocks())
    again_payload.insert(again_payload.end(),
                         static_cast<const char*>(b.iov_base),
                         static_cast<const char*>(b.iov_base) + b.iov_len);
  bytes_source src2;
  src2.p = reinterpret_cast<const uint8_t*>(again_payload.data());
  src2.left = again_payload.size();
  frame::reader in2{sys(), w.descriptor(), src2, w.payload()};
  caf::message back;
  if (back.load(in2) || !in2.leftover().empty())
    __builtin_trap();
  return 0;
}
