// bench/ps_throughput: parameter-server wire throughput between two
// processes on loopback, next to a plain TCP socket copy of the same bytes.
//
// The binary starts a copy of itself (/proc/self/exe --serve) that
//   - spawns a PS shard holding one dense variable of --floats floats
//     (a dense layer [floats, 1] and its 1-float bias; sgd, unbounded
//     staleness) and publishes it on 127.0.0.1 (a free port);
//   - starts a data plane (runtime/net/data_plane.hpp) on 127.0.0.1 (a free
//     port) with a secret it makes;
//   - listens on a plain TCP socket (a free port) that, per request, reads
//     N bytes and writes them back: all N first, then back
//     (store-and-forward), or each chunk of 1 MiB back as it arrives
//     (streaming, the reader reading while the writer writes);
// and prints its ports and the secret on one line. The parent then, in
// the same run:
//   - PS: joins as worker 0 with af::ps_client (what a trainer runs) and
//     does --rounds of push (all gradients) + pull (all parameters), once
//     with large slices in parts of --part-kib (runtime/protocol/ps.hpp, "Parts")
//     and once with one message per shard; with --plane data (the
//     default) the client reaches the shard on the data plane, as a job's
//     trainers do: on the child's Unix socket, as between two processes in
//     one network namespace of one machine, with the tensors in memory the
//     two share; with --plane data-unix the same without shared memory (the
//     tensors through the socket); with --plane data-tcp on the
//     data plane over loopback TCP, as between machines; with --plane caf
//     through CAF's middleman (before issue 17, every job's path);
//   - TCP: sends the same bytes and reads them back, --rounds times, store
//     and forward, and streaming;
// after a warm-up of each (--warmup rounds; a fresh connection is slow for
// its first ~100-200 MB). MB/s = (bytes pushed + bytes pulled) / seconds,
// payload only (1 MB = 1e6 bytes). The four alternate --reps times; the
// table holds the medians and the medians of the per-run ratios to the
// store-and-forward copy (a push+pull is one: the pull is sent after the
// push was read).
// Afterwards it checks that every push was applied exactly once and that
// pulls in parts and in one message agree (exit 1 and no table if not).
//
// The child is always stopped: its stdin is a pipe from the parent and it
// exits when that closes (so also when the parent dies); the parent waits
// for it and kills it if it does not end within 10 s.
#include <algorithm>
#include <cmath>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <spdlog/spdlog.h>

#include "actorflow/actors/ps_shard/ps_shard.hpp"
#include "actorflow/actors/training/training_spec.hpp"
#include "actorflow/gpu/device.hpp"
#include "actorflow/gpu/model.hpp"
#include "actorflow/runtime/net/data_plane.hpp"
#include "actorflow/runtime/net/system.hpp"
#include "actorflow/runtime/ps/ps_client.hpp"

extern char** environ;

using namespace af;
using clock_type = std::chrono::steady_clock;

namespace {

[[noreturn]] void die(const std::string& what) {
  throw std::runtime_error(what + (errno ? std::string{": "} + std::strerror(errno)
                                         : std::string{}));
}

training_spec make_spec(int64_t floats, uint32_t shards) {
  training_spec spec;
  spec.model.input_shape = {floats};
  gpu::layer_spec dense;
  dense.type = "dense";
  dense.units = 1;
  spec.model.layers = {dense};
  spec.model.loss = "sigmoid_binary_cross_entropy";
  spec.params = gpu::param_specs(spec.model);
  spec.optimizer.type = "sgd";
  spec.optimizer.learning_rate = 1e-3;
  spec.shards = shards;
  spec.workers = 1;
  spec.seed = 1;
  return spec;
}

void configure(caf::actor_system_config& cfg, size_t threads) {
  add_message_types(cfg);
  apply(engine_options{threads, "sharing"}, cfg);
  enable_network(cfg);
}

void write_all(int fd, const void* p, size_t n) {
  auto* c = static_cast<const char*>(p);
  while (n > 0) {
    auto k = ::send(fd, c, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      die("tcp send");
    c += k;
    n -= static_cast<size_t>(k);
  }
}

// false on a clean end of stream before the first byte.
bool read_all(int fd, void* p, size_t n) {
  auto* c = static_cast<char*>(p);
  size_t got = 0;
  while (got < n) {
    auto k = ::recv(fd, c + got, n - got, 0);
    if (k < 0 && errno == EINTR)
      continue;
    if (k == 0 && got == 0)
      return false;
    if (k <= 0)
      die("tcp recv");
    got += static_cast<size_t>(k);
  }
  return true;
}

int listen_any(uint16_t& port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    die("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0
      || ::listen(fd, 1) != 0)
    die("bind/listen");
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  port = ntohs(a.sin_port);
  return fd;
}

// A request's byte count with this bit set: streaming (see above).
constexpr uint64_t streaming_bit = uint64_t{1} << 63;
constexpr size_t stream_chunk = size_t{1} << 20;

// The plain copy's server: per request a u64 byte count N, then N bytes in,
// then N bytes back (chunk by chunk when streaming). Ends at the client's
// end of stream.
void tcp_serve(int listener) {
  int fd = ::accept(listener, nullptr, nullptr);
  if (fd < 0)
    return;
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::vector<char> buf;
  try {
    for (;;) {
      uint64_t n = 0;
      if (!read_all(fd, &n, sizeof n))
        break;
      if (n & streaming_bit) {
        n &= ~streaming_bit;
        buf.resize(stream_chunk);
        for (uint64_t done = 0; done < n;) {
          auto k = std::min<uint64_t>(stream_chunk, n - done);
          read_all(fd, buf.data(), k);
          write_all(fd, buf.data(), k);
          done += k;
        }
        continue;
      }
      buf.resize(n);
      read_all(fd, buf.data(), n);
      write_all(fd, buf.data(), n);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ps_throughput --serve: %s\n", e.what());
  }
  ::close(fd);
}

int serve(int64_t floats, size_t threads, uint32_t shards,
          const std::string& plane, size_t shm_mib) {
  // Ends with the parent even if the parent could not close our stdin.
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  auto spec = make_spec(floats, shards);
  caf::actor_system_config cfg;
  configure(cfg, threads);
  caf::actor_system sys{cfg};
  std::vector<caf::actor> shard_actors;
  std::string ports;
  for (uint32_t k = 0; k < shards; ++k) {
    ps_shard_config sc;
    sc.shard = k;
    sc.shards = shards;
    sc.params = spec.params;
    sc.optimizer = spec.optimizer;
    sc.expected_workers = 1;
    sc.seed = spec.seed;
    shard_actors.push_back(spawn_ps_shard(sys, sc));
    auto p = sys.middleman().publish(shard_actors.back(), 0, "127.0.0.1");
    if (!p) {
      std::fprintf(stderr, "ps_throughput --serve: publish: %s\n",
                   sys.render(p.error()).c_str());
      for (auto& a : shard_actors)
        caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
      return 1;
    }
    ports += (ports.empty() ? "" : ",") + std::to_string(*p);
  }
  uint16_t tcp_port = 0;
  int listener = listen_any(tcp_port);
  std::thread tcp{tcp_serve, listener};
  data_plane::options dp;
  dp.listen_host = "127.0.0.1";
  dp.shared_memory = plane == "data" ? shm_mib << 20 : 0;
  auto data = data_plane::start(sys, dp);
  auto secret = make_job_secret();
  data->accept_secret(secret);
  std::string hex;
  for (unsigned char c : secret) {
    char b[3];
    std::snprintf(b, sizeof b, "%02x", c);
    hex += b;
  }
  std::printf("tcp_port %u ps_ports %s data_port %u secret %s\n",
              static_cast<unsigned>(tcp_port), ports.c_str(),
              static_cast<unsigned>(data->port()), hex.c_str());
  std::fflush(stdout);
  // Until the parent closes our stdin (or dies).
  char c;
  while (::read(0, &c, 1) > 0) {
  }
  // The TCP server ends when the parent closed its socket (it has, before
  // closing our stdin); if it never connected, accept is interrupted here.
  ::shutdown(listener, SHUT_RDWR);
  tcp.join();
  ::close(listener);
  // CAF 0.17 keeps published (and remotely addressed) actors in its
  // registry, and a detached actor still registered there blocks the
  // system's shutdown (actor-framework issue #1110, fixed in 0.18): take
  // the shards out once they are gone. A message the middleman serializes
  // late can still put one back (seen about once in 50 runs), so a
  // watchdog ends this process if the shutdown hangs anyway.
  {
    caf::scoped_actor self{sys};
    for (auto& a : shard_actors) {
      sys.middleman().unpublish(a);
      self->monitor(a);
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    }
    for (size_t i = 0; i < shard_actors.size(); ++i)
      self->receive([](const caf::down_msg&) {},
                    caf::after(std::chrono::seconds{5}) >> [] {});
    for (auto& a : shard_actors)
      sys.registry().erase(a->id());
  }
  data_plane::stop(sys);
  std::thread{[] {
    std::this_thread::sleep_for(std::chrono::seconds{5});
    std::fprintf(stderr, "ps_throughput --serve: CAF's shutdown hangs "
                         "(actor-framework issue #1110): exiting\n");
    std::fflush(stderr);
    ::_exit(0);
  }}.detach();
  return 0;
}

// The child: started with --serve, stdin and stdout pipes to us.
class child_process {
public:
  child_process(const std::vector<std::string>& args) {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0)
      die("pipe");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    int rc = posix_spawn(&pid_, "/proc/self/exe", &fa, nullptr, argv.data(),
                         environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(in[0]);
    ::close(out[1]);
    if (rc != 0) {
      ::close(in[1]);
      ::close(out[0]);
      errno = rc;
      die("posix_spawn /proc/self/exe");
    }
    stdin_ = in[1];
    stdout_ = out[0];
  }

  // The child's first line (its ports); throws if it ends first.
  std::string first_line() {
    std::string line;
    char c;
    for (;;) {
      auto k = ::read(stdout_, &c, 1);
      if (k < 0 && errno == EINTR)
        continue;
      if (k <= 0)
        throw std::runtime_error("the --serve process ended before "
                                 "printing its ports");
      if (c == '\n')
        return line;
      line += c;
    }
  }

  // Closes its stdin (it exits), waits 10 s at most, then kills it.
  int stop() {
    if (pid_ <= 0)
      return status_;
    if (stdin_ >= 0)
      ::close(stdin_);
    stdin_ = -1;
    for (int i = 0; i < 100; ++i) {
      if (::waitpid(pid_, &status_, WNOHANG) == pid_) {
        pid_ = -1;
        return status_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds{100});
    }
    std::fprintf(stderr, "ps_throughput: the --serve process did not stop "
                         "within 10 s: killing it\n");
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status_, 0);
    pid_ = -1;
    return status_;
  }

  ~child_process() {
    stop();
    if (stdout_ >= 0)
      ::close(stdout_);
  }

private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  int stdout_ = -1;
  int status_ = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Every gradient element the client pushes (samples = 1): with sgd at
// lr 1e-3 each push moves every parameter by -1e-6, so a piece lost or
// applied twice shows in verify().
constexpr float grad_value = 1e-3f;

struct ps_side {
  caf::actor_system& sys;
  std::vector<caf::actor> shards;
  training_spec spec;
  std::unique_ptr<gpu::device> dev;
  std::unique_ptr<gpu::model> model;
  std::unique_ptr<ps_client> client;
  uint64_t step = 0;
  size_t bytes = 0; // per push (= per pull)

  ps_side(caf::actor_system& s, std::vector<caf::actor> sh, int64_t floats)
    : sys(s), shards(std::move(sh)),
      spec(make_spec(floats, static_cast<uint32_t>(shards.size()))) {
    dev = gpu::make_cpu_device();
    model = std::make_unique<gpu::model>(spec.model, *dev);
    // Finite gradients (a push with NaN or Inf carries none).
    for (size_t i = 0; i < spec.params.size(); ++i) {
      std::vector<float> g(static_cast<size_t>(spec.params[i].size()),
                           grad_value);
      dev->upload(model->grad(i).get(), g.data(), g.size() * sizeof(float));
      bytes += g.size() * sizeof(float);
    }
    client = std::make_unique<ps_client>(sys, shards, spec.params, 0);
    client->join();
  }

  // `rounds` of push + pull in parts of `part_bytes` (0: one message per
  // shard); MB/s of payload.
  double run(int rounds, size_t part_bytes, size_t window) {
    client->set_part_bytes(part_bytes, window);
    auto t0 = clock_type::now();
    for (int r = 0; r < rounds; ++r) {
      ++step;
      auto res = client->push(*model, step, 1, {}, 0);
      if (!res.nonfinite.empty())
        throw std::runtime_error("non-finite gradient in " + res.nonfinite);
      client->pull(*model, step, {});
    }
    client->flush();
    auto s = std::chrono::duration<double>(clock_type::now() - t0).count();
    return 2.0 * static_cast<double>(bytes) * rounds / s / 1e6;
  }

  std::vector<float> values(size_t i) {
    std::vector<float> v(static_cast<size_t>(spec.params[i].size()));
    dev->download(v.data(), model->value(i).get(), v.size() * sizeof(float));
    return v;
  }

  // After the runs: the shards applied each push once (their stats), the
  // parameters are the initial values moved by every push exactly once,
  // and a pull in parts brings the same bytes as a pull in one message.
  // "" or what is wrong.
  std::string verify(size_t part_bytes, size_t window) {
    caf::scoped_actor self{sys};
    for (size_t k = 0; k < shards.size(); ++k) {
      std::string err;
      self->request(shards[k], std::chrono::seconds{30}, ps_stats_atom::value)
        .receive(
          [&](const ps_shard_stats& st) {
            if (st.pushes != step || st.duplicates != 0 || st.version != step)
              err = "shard " + std::to_string(k) + ": "
                    + std::to_string(st.pushes) + " pushes, "
                    + std::to_string(st.duplicates) + " duplicates, version "
                    + std::to_string(st.version) + " after "
                    + std::to_string(step) + " pushes";
          },
          [&](caf::error& e) { err = "ps_stats: " + sys.render(e); });
      if (!err.empty())
        return err;
    }
    client->set_part_bytes(part_bytes, window);
    client->pull(*model, step, {});
    std::vector<std::vector<float>> parts;
    for (size_t i = 0; i < spec.params.size(); ++i)
      parts.push_back(values(i));
    client->set_part_bytes(0, window);
    client->pull(*model, step, {});
    auto moved = static_cast<double>(spec.optimizer.learning_rate)
                 * grad_value * static_cast<double>(step);
    for (size_t i = 0; i < spec.params.size(); ++i) {
      auto one = values(i);
      if (std::memcmp(one.data(), parts[i].data(),
                      one.size() * sizeof(float))
          != 0)
        return spec.params[i].name + ": a pull in parts differs from one "
                                     "in one message";
      for (size_t e = 0; e < one.size(); ++e) {
        auto want = static_cast<double>(
                      gpu::initial_value(spec.params[i], spec.seed, e))
                    - moved;
        // One push moves by 1e-6; float rounding over the pushes stays
        // far below a quarter of that.
        if (std::abs(static_cast<double>(one[e]) - want) > 2.5e-7)
          return spec.params[i].name + "[" + std::to_string(e) + "] is "
                 + std::to_string(one[e]) + ", expected "
                 + std::to_string(want) + " after "
                 + std::to_string(step) + " pushes";
      }
    }
    return {};
  }
};

struct tcp_side {
  int fd = -1;
  std::vector<char> out, in;

  tcp_side(uint16_t port, size_t bytes) : out(bytes, 7), in(bytes) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    if (fd < 0
        || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
      die("tcp connect");
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~tcp_side() {
    if (fd >= 0)
      ::close(fd);
  }

  // Store and forward: all bytes out, then all back.
  double run(int rounds) {
    auto t0 = clock_type::now();
    for (int r = 0; r < rounds; ++r) {
      uint64_t n = out.size();
      write_all(fd, &n, sizeof n);
      write_all(fd, out.data(), n);
      if (!read_all(fd, in.data(), n))
        throw std::runtime_error("tcp: the server closed the connection");
    }
    auto s = std::chrono::duration<double>(clock_type::now() - t0).count();
    return 2.0 * static_cast<double>(out.size()) * rounds / s / 1e6;
  }

  // Streaming: a thread writes while this one reads what comes back.
  double run_streaming(int rounds) {
    auto t0 = clock_type::now();
    for (int r = 0; r < rounds; ++r) {
      uint64_t n = out.size() | streaming_bit;
      write_all(fd, &n, sizeof n);
      std::thread writer{[this] { write_all(fd, out.data(), out.size()); }};
      bool ok = read_all(fd, in.data(), in.size());
      writer.join();
      if (!ok)
        throw std::runtime_error("tcp: the server closed the connection");
    }
    auto s = std::chrono::duration<double>(clock_type::now() - t0).count();
    return 2.0 * static_cast<double>(out.size()) * rounds / s / 1e6;
  }
};

int finish(child_process& child);

int run_parent(int64_t floats, int rounds, int warmup, int reps,
               size_t threads, uint32_t shards, size_t part_bytes,
               size_t window, const std::string& plane, size_t shm_mib,
               bool ps_only) {
  std::vector<std::string> args{"ps_throughput", "--serve", "--floats",
                                std::to_string(floats), "--threads",
                                std::to_string(threads), "--shards",
                                std::to_string(shards), "--plane", plane,
                                "--data-shm", std::to_string(shm_mib)};
  child_process child{args};
  int tcp_port = 0;
  int data_port = 0;
  auto line = child.first_line();
  char ports[4096] = {0};
  char hex[129] = {0};
  if (std::sscanf(line.c_str(),
                  "tcp_port %d ps_ports %4000s data_port %d secret %128s",
                  &tcp_port, ports, &data_port, hex)
      != 4)
    throw std::runtime_error("unexpected line from --serve: " + line);
  std::string secret;
  for (size_t i = 0; hex[i] != 0 && hex[i + 1] != 0; i += 2)
    secret += static_cast<char>(std::stoi(std::string{hex + i, 2}, nullptr, 16));
  {
    caf::actor_system_config cfg;
    configure(cfg, threads);
    caf::actor_system sys{cfg};
    std::vector<caf::actor> remote;
    for (char* p = std::strtok(ports, ","); p; p = std::strtok(nullptr, ",")) {
      auto shard = sys.middleman().remote_actor(
        "127.0.0.1", static_cast<uint16_t>(std::atoi(p)));
      if (!shard)
        throw std::runtime_error("remote_actor: " + sys.render(shard.error()));
      remote.push_back(*shard);
    }
    if (plane != "caf") {
      data_route r;
      r.node = remote.front().node();
      r.name = "--serve";
      r.host = "127.0.0.1";
      r.port = static_cast<uint16_t>(data_port);
      r.secret = secret;
      data_plane::options opts;
      opts.local_sockets = plane != "data-tcp";
      opts.shared_memory = plane == "data" ? shm_mib << 20 : 0;
      auto dp = data_plane::start(sys, opts);
      dp->add_routes({r});
      if (auto why = dp->probe(r); !why.empty())
        throw std::runtime_error("data plane: " + why);
      if ((dp->stats().local == 1) != (plane != "data-tcp"))
        throw std::runtime_error(
          std::string{"data plane: connected over "}
          + (dp->stats().local == 1 ? "a Unix socket" : "TCP")
          + ", not as --plane " + plane + " asks");
    }
    ps_side ps{sys, std::move(remote), floats};
    tcp_side tcp{static_cast<uint16_t>(tcp_port), ps.bytes};
    auto mib = static_cast<double>(ps.bytes) / (1 << 20);
    std::printf("# ps_throughput: one dense variable of %lld floats + 1 "
                "(%.2f MiB per push and per pull) on %u shard(s), %d rounds "
                "of push+pull per run after %d warm-up rounds, medians of "
                "%d runs of each (interleaved), %zu threads, sharing "
                "scheduler, PS over %s\n\n",
                static_cast<long long>(floats), mib, shards, rounds, warmup,
                reps, threads,
                plane == "data"
                  ? "the data plane (shared memory beside a Unix socket)"
                : plane == "data-unix" ? "the data plane (a Unix socket)"
                : plane == "data-tcp"  ? "the data plane (loopback TCP)"
                                       : "CAF's middleman");
    std::fflush(stdout);
    if (ps_only) {
      // For bench/copy_count.sh: the PS traffic alone (parts), nothing
      // else, so that what a profiler counts is the PS path's; the bytes
      // it moved, for the per-byte figures.
      auto total = warmup + reps * rounds;
      ps.run(total, part_bytes, window);
      ps.client->leave();
      std::printf("ps_payload_bytes %llu\n",
                  static_cast<unsigned long long>(2 * ps.bytes)
                    * static_cast<unsigned long long>(total));
      std::fflush(stdout);
      ::shutdown(tcp.fd, SHUT_RDWR);
      data_plane::stop(sys);
      return finish(child);
    }
    tcp.run(warmup);
    tcp.run_streaming(warmup);
    ps.run(warmup, part_bytes, window);
    ps.run(warmup, 0, window);
    std::vector<double> ps_runs, one_runs, tcp_runs, stream_runs, ratios,
      one_ratios, stream_ratios;
    for (int i = 0; i < reps; ++i) {
      tcp_runs.push_back(tcp.run(rounds));
      stream_runs.push_back(tcp.run_streaming(rounds));
      ps_runs.push_back(ps.run(rounds, part_bytes, window));
      one_runs.push_back(ps.run(rounds, 0, window));
      ratios.push_back(ps_runs.back() / tcp_runs.back());
      one_ratios.push_back(one_runs.back() / tcp_runs.back());
      stream_ratios.push_back(stream_runs.back() / tcp_runs.back());
      std::fprintf(stderr,
                   "run %d: tcp %.0f MB/s, tcp streaming %.0f MB/s, ps in "
                   "parts %.0f MB/s, ps one message %.0f MB/s\n",
                   i + 1, tcp_runs.back(), stream_runs.back(),
                   ps_runs.back(), one_runs.back());
    }
    if (auto err = ps.verify(part_bytes, window); !err.empty())
      throw std::runtime_error("check failed: " + err);
    ps.client->leave();
    std::fprintf(stderr, "check: %llu pushes applied once each; pulls in "
                         "parts and in one message agree\n",
                 static_cast<unsigned long long>(ps.step));
    if (auto dp = data_plane::of(sys)) {
      auto st = dp->stats();
      std::printf("data plane, this process: %.1f MiB of tensors sent "
                  "through shared memory; messages through the socket for "
                  "want of room there: %llu\n",
                  static_cast<double>(st.bytes_shared) / (1 << 20),
                  static_cast<unsigned long long>(st.region_full));
    }
    std::printf("| transport (2 processes, loopback) | push+pull MB/s "
                "| vs plain TCP |\n|---|---|---|\n");
    std::printf("| plain TCP socket copy, store and forward | %.0f | 100%% "
                "|\n",
                median(tcp_runs));
    std::printf("| plain TCP socket copy, streaming | %.0f | %.1f%% |\n",
                median(stream_runs), 100.0 * median(stream_ratios));
    std::printf("| ps push+pull, parts of %.2f MiB, window %zu "
                "| %.0f | %.1f%% |\n",
                static_cast<double>(part_bytes) / (1 << 20), window,
                median(ps_runs), 100.0 * median(ratios));
    std::printf("| ps push+pull, one message per shard | %.0f | %.1f%% |\n",
                median(one_runs), 100.0 * median(one_ratios));
    std::fflush(stdout);
    ::shutdown(tcp.fd, SHUT_RDWR);
    data_plane::stop(sys);
  }
  return finish(child);
}

int finish(child_process& child) {
  int status = child.stop();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "ps_throughput: the --serve process ended with "
                         "status %d\n",
                 status);
    return 1;
  }
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"Parameter-server push+pull throughput between two processes "
               "next to a plain TCP copy"};
  int64_t floats = int64_t{4} << 20;
  int rounds = 32;
  int warmup = 8;
  int reps = 5;
  size_t threads = 2;
  bool serve_role = false;
  uint32_t shards = 1;
  size_t part_kib = 4096;
  size_t window = 8;
  std::string plane = "data";
  app.add_option("--floats", floats, "Floats of the dense variable")
    ->capture_default_str();
  app.add_option("--rounds", rounds, "Push+pull rounds per run")
    ->capture_default_str();
  app.add_option("--warmup", warmup, "Warm-up rounds (each transport)")
    ->capture_default_str();
  app.add_option("--reps", reps, "Run pairs (medians are reported)")
    ->capture_default_str();
  app.add_option("--threads", threads, "Scheduler threads per process")
    ->capture_default_str();
  app.add_option("--shards", shards,
                 "PS shards in the serving process (each its slice)")
    ->capture_default_str();
  app.add_option("--part-kib", part_kib,
                 "ps_client part size in KiB (ps_client::set_part_bytes)")
    ->capture_default_str();
  app.add_option("--window", window, "Pull parts in flight")
    ->capture_default_str();
  app.add_option("--plane", plane,
                 "How the PS client reaches the shard: data (the data "
                 "plane, as jobs do: tensors in shared memory beside a Unix "
                 "socket between processes of one machine), data-unix (the "
                 "data plane, tensors through the Unix socket), data-tcp "
                 "(the data plane over loopback TCP, as between machines) "
                 "or caf (CAF's middleman)")
    ->check(CLI::IsMember({"data", "data-unix", "data-tcp", "caf"}))
    ->capture_default_str();
  size_t shm_mib = 64;
  app.add_option("--data-shm", shm_mib,
                 "With --plane data: MiB of shared memory per direction "
                 "(actorflow node --data-shm); a message that does not fit "
                 "goes through the socket")
    ->check(CLI::Range(1, 65536))
    ->capture_default_str();
  bool ps_only = false;
  app.add_flag("--ps-only", ps_only,
               "Only the PS push+pull in parts, warmup + reps x rounds "
               "rounds, then print ps_payload_bytes N (no baselines, no "
               "table, no check): for profilers (bench/copy_count.sh)");
  app.add_flag("--serve", serve_role,
               "Internal: the child's role (shard and TCP server)");
  CLI11_PARSE(app, argc, argv);
  if (floats < 1 || rounds < 1 || warmup < 0 || reps < 1 || shards < 1) {
    std::fprintf(stderr, "ps_throughput: --floats, --rounds and --reps must "
                         "be >= 1, --warmup >= 0\n");
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  try {
    if (serve_role)
      return serve(floats, threads, shards, plane, shm_mib);
    return run_parent(floats, rounds, warmup, reps, threads, shards,
                      part_kib << 10, window, plane, shm_mib, ps_only);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ps_throughput: %s\n", e.what());
    return 1;
  }
}
