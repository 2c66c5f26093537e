// Helpers of the CUDA agreement tests: both devices side by side, arrays
// with the same contents on each, random inputs, and comparisons that name
// the worst element.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "actorflow/gpu/device.hpp"
#include "actorflow/runtime/core/random.hpp"

namespace af::gpu::test {

/// d[0] is the CPU device, d[1] the CUDA device.
struct devices {
  std::unique_ptr<device> cpu = make_cpu_device();
  std::unique_ptr<device> gpu = make_cuda_device(0);
  device& operator[](int k) { return k == 0 ? *cpu : *gpu; }
};

/// Both devices, or nullptr after printing why where there is no GPU.
inline std::unique_ptr<devices> devices_or_skip() {
  std::string why;
  if (!cuda_available(&why)) {
    std::cout << "SKIP: no GPU: " << why << std::endl;
    return nullptr;
  }
  return std::make_unique<devices>();
}

/// One array with the same contents on both devices.
class twin {
public:
  twin(devices& d, size_t bytes) : d_(&d), bytes_(bytes) {
    for (int k = 0; k < 2; ++k)
      a_[k] = darray(d[k], bytes);
  }
  template <class T>
  twin(devices& d, const std::vector<T>& host)
    : twin(d, host.size() * sizeof(T)) {
    for (int k = 0; k < 2; ++k)
      d[k].upload(a_[k].get(), host.data(), bytes_);
  }

  float* f(int k) const { return a_[k].f32(); }
  const int32_t* i(int k) const { return a_[k].i32(); }
  void* get(int k) const { return a_[k].get(); }

  std::vector<float> read(int k) const {
    std::vector<float> v(bytes_ / sizeof(float));
    (*d_)[k].download(v.data(), a_[k].get(), bytes_);
    return v;
  }

private:
  devices* d_;
  size_t bytes_;
  darray a_[2];
};

inline std::vector<float> random_floats(size_t n, uint64_t seed, double lo = -1,
                                        double hi = 1) {
  af::record_rng rng{seed};
  std::vector<float> v(n);
  for (auto& x : v)
    x = static_cast<float>(rng.uniform(lo, hi));
  return v;
}

inline std::vector<int32_t> random_ints(size_t n, uint64_t seed,
                                        int32_t below) {
  af::record_rng rng{seed};
  std::vector<int32_t> v(n);
  for (auto& x : v)
    x = static_cast<int32_t>(rng.below(static_cast<uint64_t>(below)));
  return v;
}

/// |cpu - gpu| <= tol * (1 + |cpu|) everywhere; reports the worst element.
inline void require_close(const std::vector<float>& cpu,
                          const std::vector<float>& gpu, double tol,
                          const std::string& what) {
  REQUIRE(cpu.size() == gpu.size());
  size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    double allowed = tol * (1 + std::fabs(double(cpu[i])));
    double err = std::fabs(double(cpu[i]) - double(gpu[i]));
    if (!(err <= allowed)) { // NaN too
      double ratio = std::isnan(err) ? INFINITY : err / allowed;
      if (bad++ == 0 || ratio > worst_ratio) {
        worst = i;
        worst_ratio = ratio;
      }
    }
  }
  std::ostringstream msg;
  msg << what << ": " << bad << " of " << cpu.size()
      << " elements differ by more than " << tol << " * (1 + |cpu|)";
  if (bad > 0)
    msg << "; worst [" << worst << "]: cpu " << cpu[worst] << ", gpu "
        << gpu[worst];
  INFO(msg.str());
  CHECK(bad == 0);
}

inline void require_close(const twin& t, double tol, const std::string& what) {
  require_close(t.read(0), t.read(1), tol, what);
}

} // namespace af::gpu::test
