// The trainer's step-time breakdown (trainer { timing_every_steps }) and
// its metrics (docs/training.md, "Step time").
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "actorflow/gpu/device.hpp"
#include "actorflow/runtime/protocol/stage_stats.hpp"

namespace af {

using clock_type = std::chrono::steady_clock;

inline double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

// Sums over the timed steps, in seconds. Host clocks for the phases the
// trainer runs, the device's own times (CUDA events on a GPU) for its work.
struct step_timing {
  uint64_t steps = 0;
  double step = 0;       // the whole step, from the batch's arrival on
  double prepare = 0;    // the batch into pinned memory
  double slot_wait = 0;  // waiting for a step slot (concurrent_steps)
  double pull = 0;       // waiting for parameters, and their upload
  double input_wait = 0; // waiting for the batch's upload to finish
  double compute = 0;    // forward and backward, on the host's clock
  double push = 0;       // gradients downloaded, sent (and the last push's
                         // acknowledgements waited for)
  gpu::device_times device;

  void add(const gpu::device_times& t) {
    device.input_upload += t.input_upload;
    device.param_upload += t.param_upload;
    device.download += t.download;
    device.compute += t.compute;
  }
};

// Runs a phase of a timed step, adding its host time to `sum`.
template <class F>
auto host_timed(bool on, double& sum, F&& f) {
  if (!on)
    return f();
  auto from = clock_type::now();
  struct add_on_exit {
    double& sum;
    clock_type::time_point from;
    ~add_on_exit() { sum += seconds_since(from); }
  } guard{sum, from};
  return f();
}

// The breakdown as milliseconds per timed step; `staged` batches, of which
// `in_place` were read in the GPU's memory. Nothing before a timed step.
void timing_metrics(const step_timing& t, uint64_t staged, uint64_t in_place,
                    std::vector<metric>& out);

} // namespace af
