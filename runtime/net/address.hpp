// A node's address, "HOST:PORT", as `--listen`, `--connect` and a topology's
// hosts give it (runtime/job/node.hpp, runtime/topology/topology.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace af {

/// "HOST:PORT" split; nullopt unless HOST is non-empty and PORT a number in
/// [0, 65535] (0: any free port, for `--listen` only).
struct node_address {
  std::string host;
  uint16_t port = 0;
};
std::optional<node_address> parse_address(const std::string& text);

} // namespace af
