// Simulated CPU work for demo and test stages that stand in for real ones.
#pragma once

#include <cstdint>

namespace af {

/// Spins for `ns` nanoseconds on the calling thread without yielding.
void busy_work(int64_t ns);

} // namespace af
