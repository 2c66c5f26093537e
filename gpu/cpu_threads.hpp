// How many BLAS threads a CPU trainer gets. OpenBLAS (the pthread build
// Debian ships) has one thread count for the whole process, and runs one
// multi-threaded GEMM at a time in it (a process-wide lock in its level-3
// driver): two trainers with several threads each would take turns. So a
// lone CPU trainer gets half the usable cores (the other half stays for
// the input pipeline and the runtime); with several, each gets one thread
// and the trainers are the parallelism. The trainers claim their share
// while they run (blas_share); the count is set when the first one
// claims, and shrinks as more come (it does not grow again while trainers
// run: conservative, little would gain from it).
#pragma once

#include <string>

namespace af::gpu {

/// Cores this process may run on: the CPUs of the calling thread's
/// affinity mask (taskset, cpusets; the process's unless a thread changed
/// its own), fewer when a cgroup v2 CPU quota (cpu.max of the process's
/// cgroup or one above it) allows less.
/// std::thread::hardware_concurrency() counts every CPU of the machine.
int usable_cores();

/// The sizing rule: one trainer: cores / 2 (at least 1); several: 1 each.
/// (On 2 cores one CNN trainer with 2 threads ran 7-12% slower than with
/// 1: the input pipeline needs the other core; docs/training.md.)
int blas_threads_for(int cores, int trainers) noexcept;

/// One CPU trainer's claim on the cores while it lives: sets OpenBLAS's
/// thread count to blas_threads_for(usable_cores(), live claims) when the
/// first claims, or when that is fewer than now; back to 1 when the last
/// is gone. Unless OPENBLAS_NUM_THREADS is set, which then rules.
class blas_share {
public:
  blas_share();
  ~blas_share();
  blas_share(const blas_share&) = delete;
  blas_share& operator=(const blas_share&) = delete;
};

/// OpenBLAS's threads now (what the shares set, or OPENBLAS_NUM_THREADS).
int blas_threads();

/// "OpenBLAS Haswell, 1 thread per trainer (2 usable cores, 2 CPU
/// trainers in this process)": for the log, and to tell which kernel OpenBLAS
/// picked for this CPU (a virtual machine may hide features and get a generic
/// one).
std::string blas_description();

/// A warning when OpenBLAS fell back to kernels for CPUs before AVX on a
/// CPU that has AVX2 and FMA (and OPENBLAS_CORETYPE is unset); "" otherwise.
std::string blas_core_warning();

/// Sets OpenBLAS to one thread, once per process, unless
/// OPENBLAS_NUM_THREADS is set: the CPU device's default before any
/// trainer claims cores.
void blas_default_once();

} // namespace af::gpu
