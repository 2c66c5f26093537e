// idx_source: reads an IDX image file and its IDX label file (MNIST,
// Fashion-MNIST; plain or gzip). Output: "image" u8 [n, rows, cols],
// "label" i64 [n], "index" i64 [n]. Records are split across replicas in
// contiguous ranges. Config: topology.IdxSourceConfig.
#pragma once

#include "actorflow/runtime/stage/registry.hpp"

namespace af {

stage_type idx_source_type();

} // namespace af
