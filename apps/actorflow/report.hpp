// The summary `actorflow run` prints when a job ends.
#pragma once

#include <cstdio>
#include <string>

#include "runtime/job.hpp"

namespace af::cli {

/// Totals, throughput and one row per stage (replicas summed).
void print_summary(std::FILE* out, const std::string& job_name,
                   const run_result& r);

} // namespace af::cli
