// transform: passes items through unchanged, after optional busy work per
// record and a read of every payload byte. It stands in for a decoder in
// demos and benchmarks; the items (and their buffers) are forwarded, never
// copied. Config: topology.TransformConfig.
#pragma once

#include "actorflow/runtime/stage/registry.hpp"

namespace af {

stage_type transform_type();

} // namespace af
