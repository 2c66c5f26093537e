// sink: the end of a stream. Consumes items (after optional busy work per
// item, to model a slow consumer such as a trainer) and counts them; the
// counts reach the coordinator through the stage's stats. Config:
// topology.SinkConfig.
#pragma once

#include "actorflow/runtime/stage/registry.hpp"

namespace af {

stage_type sink_type();

} // namespace af
