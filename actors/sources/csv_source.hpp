// csv_source: reads CSV files into typed columns; rows that do not fit
// (wrong number of fields, a value that does not parse as its column's
// type, a missing header column) fail the job naming FILE:LINE, or are
// skipped and counted. An empty cell of a column with a default_value
// takes that value. Config: topology.CsvSourceConfig.
#pragma once

#include "actorflow/runtime/stage/registry.hpp"

namespace af {

stage_type csv_source_type();

} // namespace af
