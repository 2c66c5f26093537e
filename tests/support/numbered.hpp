// Names with a number in them for test data, "r7".
#pragma once

#include <cstdint>
#include <string>

namespace af::test {

/// `prefix` followed by `i` (appended, not prefix + to_string(i): GCC 12's
/// -Wrestrict misfires on that at -O3).
inline std::string numbered(const char* prefix, int64_t i) {
  std::string s = prefix;
  s += std::to_string(i);
  return s;
}

} // namespace af::test
