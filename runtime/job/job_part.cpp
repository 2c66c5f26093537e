// The job's own part of a checkpoint ("job"), written by the coordinator
// (runtime/job/detail/checkpoint_round.cpp) next to the stages' parts and
// read back on --resume (runtime/job/job.cpp). Declared in
// runtime/job/job_part.hpp.
#include "actorflow/runtime/job/job_part.hpp"

#include <stdexcept>

#include "actorflow/runtime/state/state_io.hpp"

namespace af {

namespace {

const std::string job_part_tag = "job/2";

} // namespace

std::string format_job_part(const job_part& p) {
  return save_state(job_part_tag, p.topology, p.step, p.ended, p.steps,
                    p.lost);
}

job_part parse_job_part(const std::string& bytes, const std::string& where) {
  job_part p;
  try {
    load_state(bytes, job_part_tag, p.topology, p.step, p.ended, p.steps,
               p.lost);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(where + ": the job part is damaged: " + e.what());
  }
  for (auto& [label, ended] : p.ended)
    if (p.steps.count(label) == 0)
      throw std::runtime_error(where + ": the job part is damaged: replica "
                               + label + " has no step count");
  return p;
}

} // namespace af
