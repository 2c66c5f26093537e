// JSON text for the CLI's machine-readable output (inspect --json,
// run --report-json).
#pragma once

#include <cstdio>
#include <string>

namespace af::cli {

/// `s` as a JSON string literal: quotes and backslashes escaped, control
/// characters as \uXXXX; other bytes as they are.
inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

} // namespace af::cli
