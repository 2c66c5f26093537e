// Simulated CPU work for demo and test stages that stand in for real ones.
// Declared in runtime/core/busy_work.hpp.
#include "actorflow/runtime/core/busy_work.hpp"

#include <chrono>

namespace af {

void busy_work(int64_t ns) {
  if (ns <= 0)
    return;
  auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds{ns};
  while (std::chrono::steady_clock::now() < until) {
    // spin: the point is to use the CPU
  }
}

} // namespace af
