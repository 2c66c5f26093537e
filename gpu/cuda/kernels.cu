// Elementwise and row kernels of the CUDA device (see kernels.cuh). All use
// grid-stride loops over size_t indices so that any n fits one launch.
#include "actorflow/gpu/cuda/check.cuh"
#include "actorflow/gpu/cuda/kernels.cuh"

#include <algorithm>

#include "actorflow/runtime/core/random.hpp"

namespace af::gpu::cuda {
namespace {

constexpr int block = 256;
// Enough blocks to fill an H200 several times over; the loops cover the
// rest.
constexpr size_t max_blocks = 8192;

unsigned grid_for(size_t n) {
  return static_cast<unsigned>(
    std::min<size_t>((n + block - 1) / block, max_blocks));
}

__device__ size_t first_index() {
  return blockIdx.x * size_t{blockDim.x} + threadIdx.x;
}

__device__ size_t grid_stride() {
  return size_t{gridDim.x} * blockDim.x;
}

__global__ void fill_kernel(float* x, size_t n, float value) {
  for (size_t i = first_index(); i < n; i += grid_stride())
    x[i] = value;
}

__global__ void add_bias_kernel(float* y, const float* b, size_t total, int n) {
  for (size_t i = first_index(); i < total; i += grid_stride())
    y[i] += b[i % n];
}

// One thread per column: neighbouring threads read neighbouring floats of
// each row, and every column is summed in row order (deterministic).
__global__ void bias_grad_kernel(const float* dy, float* db, int m, int n) {
  for (size_t j = first_index(); j < size_t(n); j += grid_stride()) {
    float sum = 0;
    for (size_t i = 0; i < size_t(m); ++i)
      sum += dy[i * n + j];
    db[j] += sum;
  }
}

__global__ void mul_kernel(const float* a, const float* b, float* y, size_t n) {
  for (size_t i = first_index(); i < n; i += grid_stride())
    y[i] = a[i] * b[i];
}

// One thread per output value: the writes are coalesced, the reads strided
// by c (c is 3 for RGB).
__global__ void hwc_to_chw_kernel(const float* x, float* y, size_t n,
                                  size_t plane, size_t c) {
  for (size_t o = first_index(); o < n; o += grid_stride()) {
    size_t p = o % plane;
    size_t k = (o / plane) % c;
    size_t i = o / (plane * c);
    y[o] = x[(i * plane + p) * c + k];
  }
}

__global__ void relu_forward_kernel(const float* x, float* y, size_t n) {
  for (size_t i = first_index(); i < n; i += grid_stride())
    y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ void relu_backward_kernel(const float* y, const float* dy, float* dx,
                                     size_t n) {
  for (size_t i = first_index(); i < n; i += grid_stride())
    dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

// Must equal the CPU device's mask bit for bit: see device.hpp.
__global__ void dropout_kernel(float p, float keep_scale, uint64_t seed,
                               const float* x, float* mask, float* y,
                               size_t n) {
  for (size_t i = first_index(); i < n; i += grid_stride()) {
    const double u =
      static_cast<double>(af::mix64(seed ^ af::mix64(i)) >> 11) * 0x1.0p-53;
    const float m = u < p ? 0.0f : keep_scale;
    if (mask != nullptr)
      mask[i] = m;
    y[i] = x[i] * m;
  }
}

__global__ void gather_rows_kernel(const float* table, const int32_t* idx,
                                   float* out, size_t total, int d) {
  for (size_t t = first_index(); t < total; t += grid_stride()) {
    const size_t i = t / d, j = t % d;
    out[t] = table[size_t(idx[i]) * d + j];
  }
}

__global__ void scatter_add_rows_kernel(const float* dout, const int32_t* idx,
                                        float* table_grad, size_t total,
                                        int d) {
  for (size_t t = first_index(); t < total; t += grid_stride()) {
    const size_t i = t / d, j = t % d;
    atomicAdd(&table_grad[size_t(idx[i]) * d + j], dout[t]);
  }
}

__global__ void xent_loss_kernel(const float* logp, const int32_t* labels,
                                 int m, int c, float* loss) {
  for (size_t i = first_index(); i < size_t(m); i += grid_stride()) {
    const int label = labels[i];
    loss[i] = label >= 0 && label < c ? -logp[i * c + label] : nanf("");
  }
}

__global__ void xent_grad_kernel(float* g, const int32_t* labels, int m, int c,
                                 float scale) {
  const size_t total = size_t(m) * c;
  for (size_t t = first_index(); t < total; t += grid_stride()) {
    const size_t i = t / c, j = t % c;
    const float onehot = labels[i] == int(j) ? 1.0f : 0.0f;
    g[t] = scale * (expf(g[t]) - onehot);
  }
}

// loss = max(x, 0) - x * y + log(1 + exp(-|x|)), which never overflows;
// the sigmoid likewise exponentiates only non-positive numbers.
__global__ void sigmoid_bce_kernel(const float* logits, const float* labels,
                                   int m, float* loss, float* dlogits,
                                   float scale) {
  for (size_t i = first_index(); i < size_t(m); i += grid_stride()) {
    const float x = logits[i], y = labels[i];
    const float e = expf(-fabsf(x));
    if (loss != nullptr)
      loss[i] = fmaxf(x, 0.0f) - x * y + log1pf(e);
    if (dlogits != nullptr) {
      const float sig = x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
      dlogits[i] = scale * (sig - y);
    }
  }
}

} // namespace

void fill(cudaStream_t s, float* x, size_t n, float value) {
  if (n == 0)
    return;
  fill_kernel<<<grid_for(n), block, 0, s>>>(x, n, value);
  check_launch("fill_kernel");
}

void add_bias(cudaStream_t s, float* y, const float* b, int m, int n) {
  const size_t total = size_t(m) * size_t(n);
  if (m <= 0 || n <= 0)
    return;
  add_bias_kernel<<<grid_for(total), block, 0, s>>>(y, b, total, n);
  check_launch("add_bias_kernel");
}

void bias_grad(cudaStream_t s, const float* dy, float* db, int m, int n) {
  if (m <= 0 || n <= 0)
    return;
  bias_grad_kernel<<<grid_for(size_t(n)), block, 0, s>>>(dy, db, m, n);
  check_launch("bias_grad_kernel");
}

void mul(cudaStream_t s, const float* a, const float* b, float* y, size_t n) {
  if (n == 0)
    return;
  mul_kernel<<<grid_for(n), block, 0, s>>>(a, b, y, n);
  check_launch("mul_kernel");
}

void hwc_to_chw(cudaStream_t s, const float* x, float* y, int n, int h, int w,
                int c) {
  auto plane = static_cast<size_t>(h) * static_cast<size_t>(w);
  auto total = static_cast<size_t>(n) * plane * static_cast<size_t>(c);
  if (total == 0)
    return;
  hwc_to_chw_kernel<<<grid_for(total), block, 0, s>>>(
    x, y, total, plane, static_cast<size_t>(c));
  check_launch("hwc_to_chw_kernel");
}

void relu_forward(cudaStream_t s, const float* x, float* y, size_t n) {
  if (n == 0)
    return;
  relu_forward_kernel<<<grid_for(n), block, 0, s>>>(x, y, n);
  check_launch("relu_forward_kernel");
}

void relu_backward(cudaStream_t s, const float* y, const float* dy, float* dx,
                   size_t n) {
  if (n == 0)
    return;
  relu_backward_kernel<<<grid_for(n), block, 0, s>>>(y, dy, dx, n);
  check_launch("relu_backward_kernel");
}

void dropout_forward(cudaStream_t s, float p, uint64_t seed, const float* x,
                     float* mask, float* y, size_t n) {
  if (n == 0)
    return;
  const float keep_scale = 1.0f / (1.0f - p);
  dropout_kernel<<<grid_for(n), block, 0, s>>>(p, keep_scale, seed, x, mask, y,
                                               n);
  check_launch("dropout_kernel");
}

void gather_rows(cudaStream_t s, const float* table, const int32_t* idx,
                 float* out, int m, int d) {
  if (m <= 0 || d <= 0)
    return;
  const size_t total = size_t(m) * size_t(d);
  gather_rows_kernel<<<grid_for(total), block, 0, s>>>(table, idx, out, total,
                                                       d);
  check_launch("gather_rows_kernel");
}

void scatter_add_rows(cudaStream_t s, const float* dout, const int32_t* idx,
                      float* table_grad, int m, int d) {
  if (m <= 0 || d <= 0)
    return;
  const size_t total = size_t(m) * size_t(d);
  scatter_add_rows_kernel<<<grid_for(total), block, 0, s>>>(
    dout, idx, table_grad, total, d);
  check_launch("scatter_add_rows_kernel");
}

void xent_from_log_softmax(cudaStream_t s, float* logp_then_dlogits,
                           const int32_t* labels, int m, int c, float* loss,
                           float scale) {
  if (m <= 0 || c <= 0)
    return;
  // The loss reads log-probabilities the gradient kernel then overwrites;
  // both are on `s`, so they run in this order.
  if (loss != nullptr) {
    xent_loss_kernel<<<grid_for(size_t(m)), block, 0, s>>>(logp_then_dlogits,
                                                           labels, m, c, loss);
    check_launch("xent_loss_kernel");
  }
  xent_grad_kernel<<<grid_for(size_t(m) * size_t(c)), block, 0, s>>>(
    logp_then_dlogits, labels, m, c, scale);
  check_launch("xent_grad_kernel");
}

void sigmoid_bce(cudaStream_t s, const float* logits, const float* labels,
                 int m, float* loss, float* dlogits, float scale) {
  if (m <= 0)
    return;
  sigmoid_bce_kernel<<<grid_for(size_t(m)), block, 0, s>>>(
    logits, labels, m, loss, dlogits, scale);
  check_launch("sigmoid_bce_kernel");
}

} // namespace af::gpu::cuda
