// Our own kernels, for the device primitives that neither cuBLAS nor cuDNN
// provide in the form device.hpp specifies. Each function queues one or two
// kernels on `s` and returns at once; a bad launch throws
// std::runtime_error naming the kernel. Shapes and semantics are those of
// the device call of the same name (gpu/device.hpp).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace af::gpu::cuda {

void fill(cudaStream_t s, float* x, size_t n, float value);
void add_bias(cudaStream_t s, float* y, const float* b, int m, int n);
void bias_grad(cudaStream_t s, const float* dy, float* db, int m, int n);
void mul(cudaStream_t s, const float* a, const float* b, float* y, size_t n);
void hwc_to_chw(cudaStream_t s, const float* x, float* y, int n, int h, int w,
                int c);
// Own kernels rather than cudnnActivation*: the interface pins the
// gradient at y == 0 (it is 0), which cuDNN does not document, and sizes
// are size_t where cuDNN's are int.
void relu_forward(cudaStream_t s, const float* x, float* y, size_t n);
void relu_backward(cudaStream_t s, const float* y, const float* dy, float* dx,
                   size_t n);
/// The mask formula is gpu/device.hpp's (dropout_mask there); `mask` may be
/// nullptr.
void dropout_forward(cudaStream_t s, float p, uint64_t seed, const float* x,
                     float* mask, float* y, size_t n);
void gather_rows(cudaStream_t s, const float* table, const int32_t* idx,
                 float* out, int m, int d);
/// atomicAdd: repeated indices add up, in no fixed order.
void scatter_add_rows(cudaStream_t s, const float* dout, const int32_t* idx,
                      float* table_grad, int m, int d);
/// From log-softmax `logp` [m, c] (cudnnSoftmaxForward, CUDNN_SOFTMAX_LOG):
/// loss[i] = -logp[i, label] (NaN for a label outside [0, c); `loss` may be
/// nullptr), then, in place, dlogits = scale * (exp(logp) - onehot).
void xent_from_log_softmax(cudaStream_t s, float* logp_then_dlogits,
                           const int32_t* labels, int m, int c, float* loss,
                           float scale);
/// `loss` and `dlogits` may be nullptr.
void sigmoid_bce(cudaStream_t s, const float* logits, const float* labels,
                 int m, float* loss, float* dlogits, float scale);

} // namespace af::gpu::cuda
