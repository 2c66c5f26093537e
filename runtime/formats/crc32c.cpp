// CRC32C (Castagnoli), as TFRecord files use it. Declared in
// runtime/formats/crc32c.hpp.
#include "actorflow/runtime/formats/crc32c.hpp"

#include <climits>

#include <isa-l/crc.h>

namespace af {

uint32_t crc32c(const void* data, size_t n) noexcept {
  return crc32c_extend(0, data, n);
}

uint32_t crc32c_extend(uint32_t previous, const void* data,
                       size_t n) noexcept {
  // crc32_iscsi takes an int length and no final inversion: start from
  // ~0 (the inverted CRC so far), feed chunks, invert at the end (the
  // standard CRC32C).
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));
  uint32_t crc = ~previous;
  while (n > 0) {
    auto chunk = n > static_cast<size_t>(INT_MAX) ? static_cast<size_t>(INT_MAX)
                                                   : n;
    crc = crc32_iscsi(p, static_cast<int>(chunk), crc);
    p += chunk;
    n -= chunk;
  }
  return ~crc;
}

} // namespace af
