// The trainer's step-time breakdown (trainer { timing_every_steps }) and its
// metrics (docs/training.md, "Step time"). Declared in
// actors/training/step_timing.hpp.
#include "actorflow/actors/training/step_timing.hpp"

#include <algorithm>

namespace af {

void timing_metrics(const step_timing& t, uint64_t staged, uint64_t in_place,
                    std::vector<metric>& out) {
  if (t.steps == 0)
    return;
  auto ms = [&](double s) {
    return 1000.0 * s / static_cast<double>(t.steps);
  };
  auto& d = t.device;
  double gap = t.step - t.prepare - t.slot_wait - t.pull - t.input_wait
               - d.compute - t.push;
  out.push_back({metric_name::timed_steps, static_cast<double>(t.steps)});
  // The share of batches whose input was read in the GPU's memory.
  double all = static_cast<double>(std::max<uint64_t>(staged, 1));
  out.push_back(
    {metric_name::input_in_place, static_cast<double>(in_place) / all});
  out.push_back({metric_name::step_ms, ms(t.step)});
  out.push_back({metric_name::prepare_ms, ms(t.prepare)});
  out.push_back({metric_name::slot_wait_ms, ms(t.slot_wait)});
  out.push_back({metric_name::pull_ms, ms(t.pull)});
  out.push_back({metric_name::param_h2d_ms, ms(d.param_upload)});
  out.push_back({metric_name::input_wait_ms, ms(t.input_wait)});
  out.push_back({metric_name::input_h2d_ms, ms(d.input_upload)});
  out.push_back({metric_name::compute_ms, ms(d.compute)});
  out.push_back({metric_name::compute_host_ms, ms(t.compute)});
  out.push_back({metric_name::push_ms, ms(t.push)});
  out.push_back({metric_name::grad_d2h_ms, ms(d.download)});
  out.push_back({metric_name::gap_ms, ms(std::max(0.0, gap))});
  out.push_back(
    {metric_name::device_busy,
     t.step > 0 ? (d.param_upload + d.compute + d.download) / t.step : 0.0});
}

} // namespace af
