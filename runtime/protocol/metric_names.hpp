// The names of the metrics stages report (stage_stats::metrics,
// stage_logic::metrics), in one place: the stages that report them
// (actors/), and whoever reads them (the progress line, the summary,
// TensorBoard, Prometheus, the supervisor, respawn) use these constants,
// never the string itself. The names are also what users see
// (`--report-json`, TensorBoard tags: docs/monitoring.md), so a name
// changes only with the CHANGELOG.
#pragma once

namespace af::metric_name {

// Trainers (actors/training/trainer.cpp).
inline constexpr const char* step = "step";       // the worker's clock
inline constexpr const char* epoch = "epoch";     // 0-based
inline constexpr const char* samples = "samples";
inline constexpr const char* samples_resumed = "samples_resumed";
inline constexpr const char* samples_per_s = "samples_per_s";
inline constexpr const char* loss = "loss";       // the epoch's mean
inline constexpr const char* staleness_max = "staleness_max";
inline constexpr const char* staleness_mean = "staleness_mean";
inline constexpr const char* skipped_steps = "skipped_steps";
inline constexpr const char* wait_slot_s = "wait_slot_s";
inline constexpr const char* wait_params_s = "wait_params_s";
inline constexpr const char* wait_data_s = "wait_data_s";
// Trainers and the evaluator: bytes their PS client moved.
inline constexpr const char* network_bytes = "network_bytes";

// A trainer's step timing (actors/training/step_timing.cpp), ms per step.
inline constexpr const char* step_ms = "step_ms";
inline constexpr const char* prepare_ms = "prepare_ms";
inline constexpr const char* slot_wait_ms = "slot_wait_ms";
inline constexpr const char* pull_ms = "pull_ms";
inline constexpr const char* param_h2d_ms = "param_h2d_ms";
inline constexpr const char* input_wait_ms = "input_wait_ms";
inline constexpr const char* compute_ms = "compute_ms";
inline constexpr const char* compute_host_ms = "compute_host_ms";
inline constexpr const char* push_ms = "push_ms";
inline constexpr const char* grad_d2h_ms = "grad_d2h_ms";
inline constexpr const char* gap_ms = "gap_ms";
inline constexpr const char* input_h2d_ms = "input_h2d_ms";
inline constexpr const char* input_in_place = "input_in_place";
inline constexpr const char* device_busy = "device_busy";
inline constexpr const char* timed_steps = "timed_steps";

// The evaluator (actors/training/evaluator.cpp).
inline constexpr const char* eval_step = "eval_step";
inline constexpr const char* evaluations = "evaluations";
inline constexpr const char* test_loss = "test_loss";
inline constexpr const char* test_accuracy = "test_accuracy";
inline constexpr const char* test_auc = "test_auc";
inline constexpr const char* reference_auc = "reference_auc";

// Sources and the cache: the records a replica will produce over the job,
// once known (the progress line's ETA).
inline constexpr const char* records_total = "records_total";

// image_decode on a GPU: images it decoded on the CPU instead.
inline constexpr const char* cpu_decodes = "cpu_decodes";

} // namespace af::metric_name
