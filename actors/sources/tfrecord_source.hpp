// tfrecord_source: reads TFRecord files (plain or GZIP), sharded across the
// stage's replicas by file (file i goes to replica i mod replicas), several
// files per replica read in turn (interleave). Corrupt records fail the job
// or are skipped and counted, by policy; errors name the file and offset.
// Snapshot: the open files' positions, so a restart continues exactly at
// the next unread record. Config: topology.TFRecordSourceConfig.
#pragma once

#include "actorflow/runtime/stage/registry.hpp"

namespace af {

stage_type tfrecord_source_type();

} // namespace af
