// BLAS threads per CPU trainer (gpu/cpu_threads.hpp).
#include "actorflow/gpu/cpu_threads.hpp"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <string>

extern "C" {
void openblas_set_num_threads(int);
int openblas_get_num_threads(void);
char* openblas_get_corename(void);
}

namespace af::gpu {

namespace {

std::mutex claims_mutex;
int claims = 0; // live blas_share objects

bool env_rules() {
  const char* v = std::getenv("OPENBLAS_NUM_THREADS");
  return v != nullptr && *v != '\0';
}

// A cgroup v2 cpu.max file ("max 100000" / "200000 100000"): the quota in
// whole cores (rounded up), or 0 when unlimited or unreadable.
int quota_cores(const std::string& file) {
  std::ifstream in(file);
  std::string quota;
  double period = 0;
  if (!(in >> quota >> period) || quota == "max" || period <= 0)
    return 0;
  char* end = nullptr;
  double q = std::strtod(quota.c_str(), &end);
  if (end == quota.c_str() || q <= 0)
    return 0;
  return std::max(1, static_cast<int>(std::ceil(q / period)));
}

// The smallest quota on the way from this process's cgroup (v2: the line
// "0::/path" of /proc/self/cgroup) up to the root; 0 when there is none.
// (cgroup v1's cpu.cfs_quota_us is not read.)
int cgroup_quota_cores() {
  std::ifstream in("/proc/self/cgroup");
  std::string line, path;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0)
      path = line.substr(3);
  if (!path.empty() && path.back() == '/')
    path.pop_back();
  int best = 0;
  for (;;) {
    int q = quota_cores("/sys/fs/cgroup" + path + "/cpu.max");
    if (q > 0 && (best == 0 || q < best))
      best = q;
    if (path.empty())
      break;
    auto cut = path.rfind('/');
    path = cut == std::string::npos ? "" : path.substr(0, cut);
  }
  return best;
}

// The count is set when the first trainer claims its share; later it only
// shrinks. (Growing it again when trainers leave would be safe in the
// pthread build, which only starts threads then, but the last trainer of
// a job gains little from it.)
void apply_locked(bool first) {
  if (env_rules())
    return;
  if (claims == 0) {
    openblas_set_num_threads(1);
    return;
  }
  int want = blas_threads_for(usable_cores(), claims);
  if (first || want < openblas_get_num_threads())
    openblas_set_num_threads(want);
}

} // namespace

int usable_cores() {
  int cores = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    cores = CPU_COUNT(&set);
  if (cores <= 0)
    cores = 1;
  if (int quota = cgroup_quota_cores(); quota > 0)
    cores = std::min(cores, quota);
  return cores;
}

int blas_threads_for(int cores, int trainers) noexcept {
  if (trainers != 1 || cores < 1)
    return 1;
  return std::max(1, cores / 2);
}

void blas_default_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!env_rules())
      openblas_set_num_threads(1);
  });
}

blas_share::blas_share() {
  blas_default_once();
  std::lock_guard<std::mutex> guard{claims_mutex};
  ++claims;
  apply_locked(claims == 1);
}

blas_share::~blas_share() {
  std::lock_guard<std::mutex> guard{claims_mutex};
  --claims;
  apply_locked(false);
}

int blas_threads() {
  return openblas_get_num_threads();
}

std::string blas_description() {
  int trainers = 0;
  {
    std::lock_guard<std::mutex> guard{claims_mutex};
    trainers = claims;
  }
  const char* core = openblas_get_corename();
  int threads = blas_threads();
  std::string out = std::string("OpenBLAS ") + (core ? core : "(unknown core)")
                    + ", " + std::to_string(threads)
                    + (threads == 1 ? " thread" : " threads");
  if (env_rules())
    return out + " (OPENBLAS_NUM_THREADS)";
  return out + " per trainer (" + std::to_string(usable_cores())
         + " usable cores, " + std::to_string(trainers) + " CPU trainer"
         + (trainers == 1 ? "" : "s") + " in this process)";
}

std::string blas_core_warning() {
  const char* core = openblas_get_corename();
  if (core == nullptr)
    return {};
  const std::string name = core;
  // OpenBLAS's kernels for CPUs before AVX, which it falls back to when
  // it does not recognise a CPU (a virtual machine hiding its model).
  const bool generic = name == "Prescott" || name == "Core2" || name == "Penryn"
                       || name == "Dunnington" || name == "Nehalem"
                       || name == "Atom" || name == "Katmai" || name == "Banias"
                       || name == "Northwood" || name == "Unknown";
  if (!generic || std::getenv("OPENBLAS_CORETYPE") != nullptr)
    return {};
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
    return {};
  return "OpenBLAS runs its " + name
         + " kernels on a CPU with AVX2 and FMA (it did not recognise the "
           "CPU): GEMMs run about half as fast as they could. Start "
           "actorflow with OPENBLAS_CORETYPE=Haswell (or SkylakeX on a CPU "
           "with AVX-512)";
}

} // namespace af::gpu
