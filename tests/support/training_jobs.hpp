// Training jobs for the training stages' tests: Gaussian blobs whose best
// answer is known (a linear model reaches ~100%), a source stage that makes
// them, and the topology text of a job that trains on them.
#pragma once

#include <cstdint>
#include <string>

#include "actorflow/runtime/stage/registry.hpp"
#include "tests/support/harness.hpp"

namespace af::test {

/// Record i of split `split` of the blobs: its 4 features into x, its label
/// (the class in [0, classes) whose fixed direction scores highest)
/// returned.
int64_t blob(int64_t split, int64_t i, int64_t classes, float* x);

/// The fixture with the stage type "blob_source": x f32 [n, 4] and label,
/// 32 records per item. Options: records (2000), classes (3), split (0),
/// nan_at (the record whose features are NaN; -1: none), epochs (1).
struct training_fixture : fixture {
  training_fixture();
};

/// A blob job: `training` (model, optimizer and ps blocks) and the
/// trainer's config spliced in, `train_options` into the training
/// source's stage, `replicas` trainers, an evaluator every 50 steps.
std::string blob_job(const std::string& training, const std::string& trainer,
                     const std::string& train_options = "",
                     int64_t replicas = 2);

/// An MLP (4-16-3, momentum) on 2 shards: the `training` of blob_job.
extern const std::string mlp;

/// The errors of the blob job with `trainer` options, which must not load
/// (REQUIREs that it does not), a "file:line: message" line each.
std::string validation_errors(const registry& reg, const std::string& trainer);

} // namespace af::test
