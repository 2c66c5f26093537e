// trainer: trains the job's model (Topology.training) on the batches it
// receives, as one worker of the parameter-server protocol
// (runtime/protocol/ps.hpp): pull the parameters (only the touched rows of an
// embedding), forward and backward on its device, push the gradients, and
// pull again as the staleness bound allows. Its input window is the
// prefetch depth. On a CUDA device the next batch's host-to-device copy
// runs on the copy stream while the current step computes.
//
// Reports (stage metrics): epoch, step, loss (mean over the epoch so far),
// samples/s, staleness seen, seconds waiting for data and for parameters,
// skipped steps. A replica that fails is tolerated while another trainer
// replica lives (stage_type::replicas_may_fail). Config:
// topology.TrainerConfig.
#pragma once

#include "actorflow/runtime/stage/registry.hpp"

namespace af {

stage_type trainer_type();

} // namespace af
