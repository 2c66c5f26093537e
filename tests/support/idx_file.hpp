// IDX files for tests (runtime/formats/idx.hpp reads them).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

namespace af::test {

/// The header of an IDX file of u8 values of the shape `dims` (rows
/// first).
inline std::string idx_header(std::initializer_list<uint32_t> dims) {
  std::string h{'\0', '\0', '\x08', static_cast<char>(dims.size())};
  for (auto d : dims)
    for (int shift : {24, 16, 8, 0}) // big-endian
      h.push_back(static_cast<char>(d >> shift));
  return h;
}

} // namespace af::test
