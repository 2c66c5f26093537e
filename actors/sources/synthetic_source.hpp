// synthetic_source: generates records in memory, for demos, tests and
// benchmarks of the stream machinery without any I/O.
//
// Output items: "x" u8 [n, record_bytes] (deterministic bytes from the seed
// and record index) and "label" i64 [n] (record index mod classes), n =
// records_per_item except for the last item of an epoch. Records are split
// across replicas by index (replica r of R makes records r, r+R, ...).
// Config: topology.SyntheticSourceConfig.
#pragma once

#include "actorflow/runtime/stage/registry.hpp"

namespace af {

stage_type synthetic_source_type();

} // namespace af
