// take and skip: pass only the first `count` records of the stream, or all
// but the first `count` (for train / validation splits). Counting is over
// the whole stream, so these stages have one replica. When take has its
// records it asks the producers upstream to stop and drops what is still
// in flight. Config: topology.TakeConfig.
#pragma once

#include "actorflow/runtime/stage/registry.hpp"

namespace af {

stage_type take_type();
stage_type skip_type();

} // namespace af
