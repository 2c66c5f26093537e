// cache: passes the first epoch through while keeping its items, then
// replays them for `epochs - 1` more epochs after its input ended, so that
// the stages upstream (reading, parsing, decoding) run once. Items stay in
// memory up to max_memory_bytes; the rest spill to a temporary file
// (serialized with CAF's binary serializer) that is removed at the end.
// Config: topology.CacheConfig.
#pragma once

#include "actorflow/runtime/stage/registry.hpp"

namespace af {

stage_type cache_type();

} // namespace af
