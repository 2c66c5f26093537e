// Registers every built-in stage type.
#pragma once

#include "runtime/registry.hpp"

namespace af {

void register_builtin_stages(registry& reg);

} // namespace af
