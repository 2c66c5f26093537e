// The CUDA device (gpu/device.hpp): cuBLAS for GEMM and axpy, cuDNN for
// convolution, pooling and softmax, our kernels (kernels.cuh) for the rest.
//
// Each device object owns one compute stream, where every call is queued,
// and one copy stream for upload_async; a trainer owns one device object,
// so trainers on one GPU run side by side. The cuBLAS and cuDNN handles are
// bound to the compute stream. Every public call first makes this GPU
// current on the calling thread (actors migrate between threads).
#include <algorithm>
#include <array>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actorflow/gpu/cuda/check.cuh"
#include "actorflow/gpu/cuda/cudnn_plans.cuh"
#include "actorflow/gpu/cuda/kernels.cuh"
#include "actorflow/gpu/device.hpp"

namespace af::gpu {
namespace {

using cuda::conv_plan;
using cuda::pool_plan;
using cuda::tensor_desc;

const float one = 1.0f, zero = 0.0f;

class cuda_device final : public device {
public:
  explicit cuda_device(int ordinal) : ordinal_(ordinal) {
    try {
      bind();
      cudaDeviceProp prop{};
      AF_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal_));
      name_ = "cuda:" + std::to_string(ordinal_) + " (" + prop.name + ")";
      AF_CUDA_CHECK(
        cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
      AF_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
      AF_CUDA_CHECK(
        cudaEventCreateWithFlags(&uploaded_, cudaEventDisableTiming));
      AF_CUDA_CHECK(cublasCreate(&blas_));
      AF_CUDA_CHECK(cublasSetStream(blas_, compute_));
      AF_CUDA_CHECK(cudnnCreate(&dnn_));
      AF_CUDA_CHECK(cudnnSetStream(dnn_, compute_));
    } catch (...) {
      release();
      throw;
    }
  }

  ~cuda_device() override {
    cudaSetDevice(ordinal_);
    if (compute_ != nullptr)
      cudaStreamSynchronize(compute_);
    if (copy_ != nullptr)
      cudaStreamSynchronize(copy_);
    release();
  }

  std::string name() const override { return name_; }
  bool is_cuda() const noexcept override { return true; }
  int ordinal() const noexcept override { return ordinal_; }

  // fp32: cublasSgemm with CUBLAS_DEFAULT_MATH (no TF32 since CUDA 11)
  // and FMA-only convolutions. tf32 and bf16: cublasGemmEx with float32
  // operands and a FAST_TF32 / FAST_16BF compute type (inputs rounded on
  // the tensor cores, float32 accumulation), and convolutions whose
  // algorithms may use TF32 tensor cores. Convolutions have no bf16 mode
  // here: that would need bf16 copies of every image, filter and
  // gradient.
  void set_precision(precision p) override {
    bind();
    AF_CUDA_CHECK(cudaStreamSynchronize(compute_));
    precision_ = p;
    conv_plans_.clear(); // their algorithms depend on it
  }

  // --- memory ----------------------------------------------------------

  void* allocate(size_t bytes) override {
    bind();
    void* p = nullptr;
    AF_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 1)));
    return p;
  }

  void deallocate(void* p) noexcept override {
    if (p == nullptr)
      return;
    cudaSetDevice(ordinal_);
    cudaFree(p); // waits for queued work that may still use p
  }

  void* allocate_host(size_t bytes) override {
    bind();
    void* p = nullptr;
    AF_CUDA_CHECK(cudaMallocHost(&p, std::max<size_t>(bytes, 1)));
    return p;
  }

  void deallocate_host(void* p) noexcept override {
    if (p != nullptr)
      cudaFreeHost(p);
  }

  void upload(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0)
      return;
    bind();
    auto span = begin_span(compute_);
    AF_CUDA_CHECK(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, compute_));
    end_span(span, compute_, &device_times::param_upload);
    // From page-locked memory the copy would still be reading `src` when
    // we return; the caller may reuse it at once.
    AF_CUDA_CHECK(cudaStreamSynchronize(compute_));
  }

  void upload_async(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0)
      return;
    bind();
    auto span = begin_span(copy_);
    AF_CUDA_CHECK(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, copy_));
    end_span(span, copy_, &device_times::input_upload);
    AF_CUDA_CHECK(cudaEventRecord(uploaded_, copy_));
    uploads_pending_ = true;
  }

  void wait_uploads() override {
    if (!uploads_pending_)
      return;
    bind();
    AF_CUDA_CHECK(cudaStreamWaitEvent(compute_, uploaded_, 0));
    // The caller may refill the host buffers once we return, so the copies
    // must have read them; they overlapped the compute queued before.
    AF_CUDA_CHECK(cudaEventSynchronize(uploaded_));
    uploads_pending_ = false;
  }

  void download(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0)
      return;
    bind();
    auto span = begin_span(compute_);
    AF_CUDA_CHECK(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, compute_));
    end_span(span, compute_, &device_times::download);
    AF_CUDA_CHECK(cudaStreamSynchronize(compute_));
  }

  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0)
      return;
    bind();
    AF_CUDA_CHECK(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, compute_));
  }

  void copy_columns(float* dst, int dst_stride, const float* src,
                    int src_stride, int rows, int width) override {
    if (rows <= 0 || width <= 0)
      return;
    bind();
    constexpr auto f = sizeof(float);
    AF_CUDA_CHECK(cudaMemcpy2DAsync(
      dst, static_cast<size_t>(dst_stride) * f, src,
      static_cast<size_t>(src_stride) * f, static_cast<size_t>(width) * f,
      static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, compute_));
  }

  void fill(float* x, size_t n, float value) override {
    bind();
    cuda::fill(compute_, x, n, value);
  }

  void sync() override {
    bind();
    AF_CUDA_CHECK(cudaStreamSynchronize(copy_));
    AF_CUDA_CHECK(cudaStreamSynchronize(compute_));
  }

  // --- timing ----------------------------------------------------------

  void set_timing(bool on) override {
    timing_ = on;
    if (compute_from_ != nullptr) {
      free_events_.push_back(compute_from_);
      compute_from_ = nullptr;
    }
  }

  void compute_begin() override {
    if (!timing_ || compute_from_ != nullptr)
      return;
    bind();
    compute_from_ = begin_span(compute_);
  }

  void compute_end() override {
    if (compute_from_ == nullptr)
      return;
    bind();
    auto from = std::exchange(compute_from_, nullptr);
    end_span(from, compute_, &device_times::compute);
  }

  device_times take_times() override {
    device_times out;
    if (spans_.empty())
      return out;
    bind();
    // Spans still running stay for a later call; on an error the rest stay
    // too (their events are destroyed with the device).
    std::vector<span> pending;
    for (size_t i = 0; i < spans_.size(); ++i) {
      const span sp = spans_[i];
      cudaError_t e = cudaEventQuery(sp.to);
      if (e == cudaErrorNotReady) {
        pending.push_back(sp);
        continue;
      }
      float ms = 0;
      if (e == cudaSuccess)
        e = cudaEventElapsedTime(&ms, sp.from, sp.to);
      if (e != cudaSuccess) {
        pending.insert(pending.end(),
                       spans_.begin() + static_cast<std::ptrdiff_t>(i),
                       spans_.end());
        spans_ = std::move(pending);
        AF_CUDA_CHECK(e);
      }
      out.*sp.kind += ms / 1000.0;
      free_events_.push_back(sp.from);
      free_events_.push_back(sp.to);
    }
    spans_ = std::move(pending);
    return out;
  }

  // --- dense algebra ---------------------------------------------------

  void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a,
            const float* b, float beta, float* c) override {
    if (m <= 0 || n <= 0)
      return;
    bind();
    if (k <= 0) { // op(A) op(B) is 0; cuBLAS would reject the strides
      const auto count = static_cast<int64_t>(m) * n;
      if (beta == 0)
        AF_CUDA_CHECK(
          cudaMemsetAsync(c, 0, size_t(count) * sizeof(float), compute_));
      else
        AF_CUDA_CHECK(cublasSscal_64(blas_, count, &beta, c, 1));
      return;
    }
    // cuBLAS is column-major: a row-major C [m,n] is a column-major C^T
    // [n,m] = op(B)^T op(A)^T, and a row-major operand read column-major
    // is its own transpose, so B and A swap places and keep their flags.
    const auto op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const auto op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (precision_ == precision::fp32) {
      AF_CUDA_CHECK(cublasSgemm(blas_, op_b, op_a, n, m, k, &alpha, b,
                                tb ? k : n, a, ta ? m : k, &beta, c, n));
      return;
    }
    const auto compute = precision_ == precision::bf16
                           ? CUBLAS_COMPUTE_32F_FAST_16BF
                           : CUBLAS_COMPUTE_32F_FAST_TF32;
    AF_CUDA_CHECK(cublasGemmEx(blas_, op_b, op_a, n, m, k, &alpha, b,
                               CUDA_R_32F, tb ? k : n, a, CUDA_R_32F,
                               ta ? m : k, &beta, c, CUDA_R_32F, n, compute,
                               CUBLAS_GEMM_DEFAULT));
  }

  void axpy(size_t n, float alpha, const float* x, float* y) override {
    if (n == 0)
      return;
    bind();
    AF_CUDA_CHECK(
      cublasSaxpy_64(blas_, static_cast<int64_t>(n), &alpha, x, 1, y, 1));
  }

  void add_bias(float* y, const float* b, int m, int n) override {
    bind();
    cuda::add_bias(compute_, y, b, m, n);
  }

  void bias_grad(const float* dy, float* db, int m, int n) override {
    bind();
    cuda::bias_grad(compute_, dy, db, m, n);
  }

  void mul(const float* a, const float* b, float* y, size_t n) override {
    bind();
    cuda::mul(compute_, a, b, y, n);
  }

  void hwc_to_chw(const float* x, float* y, int n, int h, int w,
                  int c) override {
    bind();
    cuda::hwc_to_chw(compute_, x, y, n, h, w, c);
  }

  // --- layers ----------------------------------------------------------

  void relu_forward(const float* x, float* y, size_t n) override {
    bind();
    cuda::relu_forward(compute_, x, y, n);
  }

  void relu_backward(const float* y, const float* dy, float* dx,
                     size_t n) override {
    bind();
    cuda::relu_backward(compute_, y, dy, dx, n);
  }

  void conv2d_forward(const conv2d_shape& s, const float* x, const float* w,
                      const float* b, float* y) override {
    bind();
    const conv_plan& p = plan(s);
    AF_CUDA_CHECK(cudnnSetConvolutionMathType(p.conv.d, p.fwd_math));
    AF_CUDA_CHECK(cudnnConvolutionForward(
      dnn_, &one, p.x.d, x, p.w.d, w, p.conv.d, p.fwd, workspace(p.fwd_bytes),
      p.fwd_bytes, &zero, p.y.d, y));
    if (b != nullptr)
      AF_CUDA_CHECK(cudnnAddTensor(dnn_, &one, p.bias.d, b, &one, p.y.d, y));
  }

  void conv2d_backward(const conv2d_shape& s, const float* x, const float* w,
                       const float* dy, float* dx, float* dw,
                       float* db) override {
    bind();
    const conv_plan& p = plan(s);
    // (cuDNN reads the descriptor when a call is queued.)
    if (dx != nullptr) {
      AF_CUDA_CHECK(cudnnSetConvolutionMathType(p.conv.d, p.bwd_data_math));
      AF_CUDA_CHECK(cudnnConvolutionBackwardData(
        dnn_, &one, p.w.d, w, p.y.d, dy, p.conv.d, p.bwd_data,
        workspace(p.bwd_data_bytes), p.bwd_data_bytes, &zero, p.x.d, dx));
    }
    if (dw != nullptr) {
      AF_CUDA_CHECK(cudnnSetConvolutionMathType(p.conv.d, p.bwd_filter_math));
      AF_CUDA_CHECK(cudnnConvolutionBackwardFilter(
        dnn_, &one, p.x.d, x, p.y.d, dy, p.conv.d, p.bwd_filter,
        workspace(p.bwd_filter_bytes), p.bwd_filter_bytes, &zero, p.w.d, dw));
    }
    if (db != nullptr)
      AF_CUDA_CHECK(cudnnConvolutionBackwardBias(dnn_, &one, p.y.d, dy, &zero,
                                                 p.bias.d, db));
  }

  void maxpool_forward(const pool_shape& s, const float* x, float* y) override {
    bind();
    const pool_plan& p = plan(s);
    AF_CUDA_CHECK(
      cudnnPoolingForward(dnn_, p.pool.d, &one, p.x.d, x, &zero, p.y.d, y));
  }

  void maxpool_backward(const pool_shape& s, const float* x, const float* y,
                        const float* dy, float* dx) override {
    bind();
    const pool_plan& p = plan(s);
    AF_CUDA_CHECK(cudnnPoolingBackward(dnn_, p.pool.d, &one, p.y.d, y, p.y.d,
                                       dy, p.x.d, x, &zero, p.x.d, dx));
  }

  void dropout_forward(float p, uint64_t seed, const float* x, float* mask,
                       float* y, size_t n) override {
    bind();
    cuda::dropout_forward(compute_, p, seed, x, mask, y, n);
  }

  void gather_rows(const float* table, const int32_t* idx, float* out, int m,
                   int d) override {
    bind();
    cuda::gather_rows(compute_, table, idx, out, m, d);
  }

  void scatter_add_rows(const float* dout, const int32_t* idx,
                        float* table_grad, int m, int d) override {
    bind();
    cuda::scatter_add_rows(compute_, dout, idx, table_grad, m, d);
  }

  // --- losses ----------------------------------------------------------

  void softmax_xent(const float* logits, const int32_t* labels, int m, int c,
                    float* loss, float* dlogits, float scale) override {
    if (m <= 0 || c <= 0)
      return;
    bind();
    float* out = dlogits;
    if (out == nullptr) { // loss only: log-probabilities need a home
      scratch_.reserve(*this, size_t(m) * size_t(c) * sizeof(float));
      out = scratch_.f32();
    }
    // Log-softmax, so that the loss is finite even where the probability
    // of the label underflows.
    tensor_desc t(m, c, 1, 1);
    AF_CUDA_CHECK(cudnnSoftmaxForward(dnn_, CUDNN_SOFTMAX_LOG,
                                      CUDNN_SOFTMAX_MODE_INSTANCE, &one, t.d,
                                      logits, &zero, t.d, out));
    cuda::xent_from_log_softmax(compute_, out, labels, m, c, loss, scale);
  }

  void sigmoid_bce(const float* logits, const float* labels, int m, float* loss,
                   float* dlogits, float scale) override {
    bind();
    cuda::sigmoid_bce(compute_, logits, labels, m, loss, dlogits, scale);
  }

private:
  void bind() { AF_CUDA_CHECK(cudaSetDevice(ordinal_)); }

  // A timed span: two events with timing on the stream the work ran on.
  using time_field = double device_times::*;
  struct span {
    time_field kind;
    cudaEvent_t from, to;
  };

  cudaEvent_t timing_event() {
    if (!free_events_.empty()) {
      auto e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    AF_CUDA_CHECK(cudaEventCreate(&e)); // with timing
    all_events_.push_back(e);
    return e;
  }

  // The start of a timed span on `stream`, or nullptr when not timing (or
  // inside a compute span, which the work then counts in).
  cudaEvent_t begin_span(cudaStream_t stream) {
    if (!timing_ || compute_from_ != nullptr)
      return nullptr;
    auto from = timing_event();
    AF_CUDA_CHECK(cudaEventRecord(from, stream));
    return from;
  }

  void end_span(cudaEvent_t from, cudaStream_t stream, time_field kind) {
    if (from == nullptr)
      return;
    auto to = timing_event();
    AF_CUDA_CHECK(cudaEventRecord(to, stream));
    spans_.push_back({kind, from, to});
  }

  // The workspace is shared by every cuDNN call: they are all queued on
  // the compute stream, so they never run at the same time.
  void* workspace(size_t bytes) {
    if (bytes > workspace_.bytes()) {
      // Work queued before may still be using the old one.
      AF_CUDA_CHECK(cudaStreamSynchronize(compute_));
      workspace_.reserve(*this, bytes);
    }
    return bytes == 0 ? nullptr : workspace_.get();
  }

  const conv_plan& plan(const conv2d_shape& s) {
    const std::array<int, 9> key{s.n, s.c, s.h,      s.w,  s.k,
                                 s.r, s.s, s.stride, s.pad};
    auto& p = conv_plans_[key];
    if (!p)
      p = std::make_unique<conv_plan>(dnn_, s, precision_ != precision::fp32);
    return *p;
  }

  const pool_plan& plan(const pool_shape& s) {
    const std::array<int, 6> key{s.n, s.c, s.h, s.w, s.window, s.stride};
    auto& p = pool_plans_[key];
    if (!p)
      p = std::make_unique<pool_plan>(s);
    return *p;
  }

  // Frees what the constructor created, in reverse; safe on a partly
  // constructed device.
  void release() noexcept {
    conv_plans_.clear();
    pool_plans_.clear();
    workspace_ = darray{};
    scratch_ = darray{};
    if (dnn_ != nullptr)
      cudnnDestroy(dnn_);
    if (blas_ != nullptr)
      cublasDestroy(blas_);
    for (auto e : all_events_)
      cudaEventDestroy(e);
    all_events_.clear();
    if (uploaded_ != nullptr)
      cudaEventDestroy(uploaded_);
    if (copy_ != nullptr)
      cudaStreamDestroy(copy_);
    if (compute_ != nullptr)
      cudaStreamDestroy(compute_);
    dnn_ = nullptr;
    blas_ = nullptr;
    uploaded_ = nullptr;
    copy_ = nullptr;
    compute_ = nullptr;
  }

  int ordinal_;
  std::string name_;
  cudaStream_t compute_ = nullptr;
  cudaStream_t copy_ = nullptr;
  cudaEvent_t uploaded_ = nullptr; // the last upload_async
  bool uploads_pending_ = false;
  precision precision_ = precision::fp32;
  // Timing (set_timing): spans not yet taken, events to reuse, and every
  // event made (to destroy them).
  bool timing_ = false;
  cudaEvent_t compute_from_ = nullptr; // an open compute span
  std::vector<span> spans_;
  std::vector<cudaEvent_t> free_events_, all_events_;
  cublasHandle_t blas_ = nullptr;
  cudnnHandle_t dnn_ = nullptr;
  darray workspace_; // cuDNN's
  darray scratch_;   // log-softmax when the caller wants no gradient
  std::map<std::array<int, 9>, std::unique_ptr<conv_plan>> conv_plans_;
  std::map<std::array<int, 6>, std::unique_ptr<pool_plan>> pool_plans_;
};

} // namespace

bool cuda_available(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError(); // not sticky, but leave nothing behind
    if (why != nullptr)
      *why = std::string{"cudaGetDeviceCount: "} + cudaGetErrorString(e);
    return false;
  }
  if (count == 0) {
    if (why != nullptr)
      *why = "cudaGetDeviceCount: no CUDA GPU";
    return false;
  }
  if (why != nullptr)
    why->clear();
  return true;
}

std::unique_ptr<device> make_cuda_device(int ordinal) {
  std::string why;
  if (!cuda_available(&why))
    throw std::runtime_error("make_cuda_device: CUDA is not available: " + why);
  int count = 0;
  AF_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (ordinal < 0 || ordinal >= count)
    throw std::runtime_error("make_cuda_device: no GPU "
                             + std::to_string(ordinal) + " (there are "
                             + std::to_string(count) + ")");
  return std::make_unique<cuda_device>(ordinal);
}

} // namespace af::gpu
