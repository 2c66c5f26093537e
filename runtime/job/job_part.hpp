// The job's own part of a checkpoint ("job"), written by the coordinator
// (runtime/job/detail/checkpoint_round.cpp) next to the stages' parts and read back
// on --resume (runtime/job/job.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

namespace af {

// The job's own part of a checkpoint, "job": a state frame
// (runtime/state/state_io.hpp) tagged "job/2" holding, in this order, the
// fields below.
struct job_part {
  /// The topology's name.
  std::string topology;
  /// The global step: the trainers' steps summed over replicas.
  uint64_t step = 0;
  /// One entry per replica of the cut: label -> whether it had ended (if
  /// not, it was live and its state is the part of that label).
  std::map<std::string, bool> ended;
  /// Label -> its steps at the cut; an entry for every key of `ended`.
  std::map<std::string, uint64_t> steps;
  /// Replicas lost before the cut (a trainer that failed: a resumed job
  /// starts it afresh).
  std::set<std::string> lost;
};

/// The part's bytes for `p`.
std::string format_job_part(const job_part& p);

/// Reads what format_job_part wrote. Throws std::runtime_error naming
/// `where` and what is wrong when `bytes` is not a job part.
job_part parse_job_part(const std::string& bytes, const std::string& where);

} // namespace af
