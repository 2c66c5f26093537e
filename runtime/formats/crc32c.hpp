// CRC32C (Castagnoli), as TFRecord files use it. Computed by Intel's ISA-L
// (libisal), which picks the CPU's CRC32 instruction where present.
#pragma once

#include <cstddef>
#include <cstdint>

namespace af {

/// CRC32C of `n` bytes at `data`.
uint32_t crc32c(const void* data, size_t n) noexcept;

/// The CRC32C of some bytes followed by `n` bytes at `data`, from the
/// CRC32C `crc` of the first: crc32c_extend(crc32c(a), b) == crc32c(a + b).
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) noexcept;

/// TFRecord's masked CRC: rotate right by 15 bits and add 0xa282ead8, so that
/// a CRC of data that itself contains CRCs is not trivially related to them.
inline uint32_t mask_crc(uint32_t crc) noexcept {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

inline uint32_t masked_crc32c(const void* data, size_t n) noexcept {
  return mask_crc(crc32c(data, n));
}

} // namespace af
