// The built-in stage types (`actorflow validate --list-types` lists them),
// the parameter-server service and the training section's checks.
#pragma once

#include "actorflow/runtime/stage/registry.hpp"

namespace af {

/// Adds every built-in stage type, the "ps" service (parameter-server
/// shards) and the checks of the topology's training section to `reg`.
/// Call once per registry: a second call throws std::invalid_argument (the
/// names are taken), as does adding a type of your own under a built-in
/// name. `reg` must outlive every job and node spawner that uses it.
void register_builtin_stages(registry& reg);

} // namespace af
