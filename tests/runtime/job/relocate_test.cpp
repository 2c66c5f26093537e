// Placing a job again after a lost node (runtime/job/relocate.hpp): which
// hosts are left out, what moves where, and which hosts do not answer.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "actorflow/actors/builtin.hpp"
#include "actorflow/runtime/job/relocate.hpp"
#include "actorflow/runtime/net/system.hpp"
#include "actorflow/runtime/topology/topology.hpp"

using namespace af;

namespace {

// The CTR job of tests/apps/data/multi_restore.pbtxt.in, placed on w1..w3
// (w4 defined and unused); `p3` is w3's address.
std::string ctr_job(const std::string& p3 = "127.0.0.1:3") {
  return R"(
name: "relocate"
host { name: "w1" address: "127.0.0.1:1" }
host { name: "w2" address: "127.0.0.1:2" }
host { name: "w3" address: ")" + p3 + R"(" }
host { name: "w4" address: "127.0.0.1:4" }
training {
  model { input: "ids" input_shape: [4] label: "label"
          layer { type: "embedding" rows: 200 dim: 4 }
          layer { type: "flatten" } layer { type: "dense" units: 1 }
          loss: "sigmoid_binary_cross_entropy" }
  optimizer { type: "adagrad" learning_rate: 0.2 }
  ps { shards: 2 hosts: ["w1", "w3"] }
}
stage { name: "clicks" type: "ctr_source" hosts: ["w1", "w2"]
        ctr_source { records: 100 features: 4 vocabulary: 50 } }
stage { name: "batch" type: "batcher" hosts: ["w2"] input { stage: "clicks" }
        batcher { batch_size: 10 } }
stage { name: "train" type: "trainer" replicas: 3 hosts: ["w2", "w3"]
        input { stage: "batch" } }
)";
}

registry builtin() {
  registry reg;
  register_builtin_stages(reg);
  return reg;
}

topology::Topology load(const registry& reg, const std::string& text) {
  auto r = load_topology_text(text, "relocate.pbtxt", reg);
  for (auto& e : r.errors)
    UNSCOPED_INFO(e.to_string());
  REQUIRE(r.ok());
  return r.topology->spec;
}

std::vector<std::string> hosts_of(const topology::Stage& s) {
  return {s.hosts().begin(), s.hosts().end()};
}

} // namespace

TEST_CASE("the hosts a job is placed on, in the order they are defined",
          "[relocate]") {
  auto reg = builtin();
  auto spec = load(reg, ctr_job());
  CHECK(placement_hosts(spec)
        == std::vector<std::string>{"w1", "w2", "w3"}); // not w4
}

TEST_CASE("a lost host is left out of every placement that has another",
          "[relocate]") {
  auto reg = builtin();
  auto spec = load(reg, ctr_job());
  std::string why;
  auto placed = place_without(spec, {"w1", "w4"}, why);
  REQUIRE(placed);
  CHECK(why.empty());
  CHECK(hosts_of(placed->stage(0)) == std::vector<std::string>{"w2"});
  CHECK(hosts_of(placed->stage(1)) == std::vector<std::string>{"w2"});
  CHECK(hosts_of(placed->stage(2)) == std::vector<std::string>{"w2", "w3"});
  CHECK(std::vector<std::string>(placed->training().ps().hosts().begin(),
                                 placed->training().ps().hosts().end())
        == std::vector<std::string>{"w3"});
  // What moved, by label: the source and ps[0] off w1; nothing else.
  CHECK(moved_replicas(spec, *placed, reg)
        == std::vector<std::string>{"clicks[0] from host 'w1' to 'w2'",
                                    "ps[0] from host 'w1' to 'w3'"});
  // The original stays as it was (the hosts come back in later restarts).
  CHECK(hosts_of(spec.stage(0)) == std::vector<std::string>{"w1", "w2"});
  CHECK(moved_replicas(spec, spec, reg).empty());
}

TEST_CASE("replicas spread over the hosts that are left", "[relocate]") {
  auto reg = builtin();
  auto spec = load(reg, ctr_job());
  std::string why;
  auto placed = place_without(spec, {"w3"}, why);
  REQUIRE(placed);
  // train: replica r on hosts[r % n]: w2, w3, w2 before; all on w2 now.
  CHECK(moved_replicas(spec, *placed, reg)
        == std::vector<std::string>{"ps[1] from host 'w3' to 'w1'",
                                    "train[1] from host 'w3' to 'w2'"});
}

TEST_CASE("a placement whose every host is lost is named", "[relocate]") {
  auto reg = builtin();
  auto spec = load(reg, ctr_job());
  std::string why;
  CHECK_FALSE(place_without(spec, {"w2"}, why));
  CHECK(why == "stage 'batch': every host of it is down (w2)");
  CHECK_FALSE(place_without(spec, {"w1", "w3"}, why));
  CHECK(why == "training.ps: every host of it is down (w1, w3)");
}

TEST_CASE("a host nothing listens on does not answer", "[relocate]") {
  // A port that was free a moment ago: bound, then closed.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  auto port = ntohs(a.sin_port);
  ::close(fd);

  auto reg = builtin();
  // Only w3 is probed: w1 and w2 are placed too, so point all of them at
  // the closed port and expect every one back, with why.
  auto text = ctr_job("127.0.0.1:" + std::to_string(port));
  for (auto p : {"127.0.0.1:1\"", "127.0.0.1:2\""})
    text.replace(text.find(p), std::string{p}.size() - 1,
                 "127.0.0.1:" + std::to_string(port));
  auto spec = load(reg, text);
  caf::actor_system_config cfg;
  add_message_types(cfg);
  enable_network(cfg, tls_options{});
  caf::actor_system sys{cfg};
  auto t0 = std::chrono::steady_clock::now();
  auto down = unreachable_hosts(sys, spec, std::chrono::seconds{2});
  auto took = std::chrono::steady_clock::now() - t0;
  REQUIRE(down.size() == 3);
  CHECK(down[0].first == "w1");
  CHECK(down[2].first == "w3");
  CHECK_THAT(down[2].second, Catch::Contains("host 'w3' (127.0.0.1:"
                                             + std::to_string(port) + ")"));
  // Refused at once, not after the timeout.
  CHECK(took < std::chrono::milliseconds{1900});
}
