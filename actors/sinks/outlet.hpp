// outlet: a sink that hands every batch to an actor of the embedding
// application (job_options::outlets[stage name]) as a request
// (outlet_atom, stage name, batch) and counts an answer (any message, or
// none from a handler returning void) as credit for the next one; at most
// `outlet { in_flight }` batches are unanswered. The batch is shared, not
// copied. The receiving actor exiting, or answering with an error, fails
// the stage and so the job. Config: topology.OutletConfig.
#pragma once

#include "actorflow/runtime/stage/registry.hpp"

namespace af {

stage_type outlet_type();

} // namespace af
