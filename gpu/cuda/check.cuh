// Turns CUDA, cuBLAS and cuDNN status codes into std::runtime_error naming
// the call that failed and the library's own description of the error.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <stdexcept>
#include <string>

namespace af::gpu::cuda {

[[noreturn]] inline void fail(const char* call, const char* what) {
  throw std::runtime_error(std::string{call} + ": " + what);
}

inline void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) {
    // The runtime also keeps `e` as its "last error", which the next
    // check_launch would report again; reset it (sticky errors stay).
    cudaGetLastError();
    fail(call, cudaGetErrorString(e));
  }
}

inline void check(cublasStatus_t e, const char* call) {
  if (e != CUBLAS_STATUS_SUCCESS)
    fail(call, cublasGetStatusString(e));
}

inline void check(cudnnStatus_t e, const char* call) {
  if (e != CUDNN_STATUS_SUCCESS)
    fail(call, cudnnGetErrorString(e));
}

/// A kernel launch reports bad configurations only through
/// cudaGetLastError; errors of the kernel itself surface at a later sync.
inline void check_launch(const char* kernel) {
  check(cudaGetLastError(), kernel);
}

} // namespace af::gpu::cuda

/// Evaluates a CUDA/cuBLAS/cuDNN call and throws, quoting it, unless it
/// succeeded.
#define AF_CUDA_CHECK(call) ::af::gpu::cuda::check((call), #call)
