// evaluator: measures the job's model on a held-out split. It keeps the
// batches of its input (the test split, read once) and, once that input
// ended, evaluates every `every_steps` global steps (pushes applied by the
// parameter servers) and once more when training finished: it pulls the
// parameters as an observer (never delayed, not counted in clocks) and
// reports loss and accuracy (softmax) or AUC (sigmoid), plus the AUC of a
// reference score field when one is named (a planted model's true
// logits). Config: topology.EvaluatorConfig.
#pragma once

#include <cstdint>
#include <vector>

#include "actorflow/runtime/stage/registry.hpp"

namespace af {

stage_type evaluator_type();

/// Area under the ROC curve of `scores` against 0/1 `labels` (ties count
/// one half); 0.5 when one class is missing.
double roc_auc(const std::vector<float>& scores,
               const std::vector<float>& labels);

} // namespace af
