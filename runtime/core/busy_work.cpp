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
