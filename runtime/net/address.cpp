// Parsing "HOST:PORT" (runtime/net/address.hpp).
#include "actorflow/runtime/net/address.hpp"

#include <cstdlib>

namespace af {

std::optional<node_address> parse_address(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    return std::nullopt;
  node_address a;
  a.host = text.substr(0, colon);
  // [::1]:4242 style IPv6 literals.
  if (a.host.size() > 2 && a.host.front() == '[' && a.host.back() == ']')
    a.host = a.host.substr(1, a.host.size() - 2);
  auto digits = text.substr(colon + 1);
  if (digits.size() > 5 || digits.find_first_not_of("0123456789")
                             != std::string::npos)
    return std::nullopt;
  auto port = std::strtoul(digits.c_str(), nullptr, 10);
  if (port > 65535)
    return std::nullopt;
  a.port = static_cast<uint16_t>(port);
  return a;
}

} // namespace af
