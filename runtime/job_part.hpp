// The job's own part of a checkpoint ("job"), written by the coordinator
// (runtime/job.cpp) next to the stages' parts and read back on --resume.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

namespace af {

// The job's own part of a checkpoint, "job": text, one item per line.
//
//   actorflow-job 1
//   topology <name>
//   step <global step>       the trainers' steps summed over replicas
//   replica <label> live <steps>    one per replica of the cut: its state
//   replica <label> ended <steps>   is the part <label>; or it had ended;
//   replica <label> lost            or it was lost before the cut (a
//                                   trainer that failed: a resumed job
//                                   starts it afresh)
struct job_part {
  std::string topology;
  uint64_t step = 0;
  std::map<std::string, bool> ended; // label -> ended (live, if false)
  std::map<std::string, uint64_t> steps;
  std::set<std::string> lost;
};

/// The part's text for `p`.
std::string format_job_part(const job_part& p);

/// Reads what format_job_part wrote. Throws std::runtime_error naming
/// `where` and the line when `text` is not a job part.
job_part parse_job_part(const std::string& text, const std::string& where);

} // namespace af
