// Failpoints: named places where a test can make the process die, to check
// what the rest of a job does when a node is lost at that exact moment
// (tests/apps/resilience_test.sh). Declared in
// runtime/testing/failpoint.hpp.
#include "actorflow/runtime/testing/failpoint.hpp"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <unistd.h>

namespace af {
namespace {

struct armed_point {
  std::string name; // empty: none
  long hit_at = 1;
  std::atomic<long> hits{0};

  armed_point() {
    const char* env = std::getenv("AF_FAILPOINT");
    if (env == nullptr || *env == '\0')
      return;
    std::string text{env};
    auto colon = text.rfind(':');
    if (colon != std::string::npos) {
      char* end = nullptr;
      auto n = std::strtol(text.c_str() + colon + 1, &end, 10);
      if (end != nullptr && *end == '\0' && n > 0) {
        hit_at = n;
        text.resize(colon);
      }
    }
    name = std::move(text);
  }
};

armed_point& point() {
  static armed_point p;
  return p;
}

} // namespace

bool failpoint_hit(std::string_view name) {
  auto& p = point();
  if (p.name.empty() || p.name != name)
    return false;
  return p.hits.fetch_add(1) + 1 == p.hit_at;
}

void failpoint(std::string_view name) {
  if (!failpoint_hit(name))
    return;
  std::fprintf(stderr, "failpoint %.*s (hit %ld): killing this process\n",
               static_cast<int>(name.size()), name.data(), point().hit_at);
  std::fflush(stderr);
  ::kill(::getpid(), SIGKILL);
}

} // namespace af
