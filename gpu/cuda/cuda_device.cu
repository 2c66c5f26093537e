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

#include "gpu/cuda/check.cuh"
#include "gpu/cuda/kernels.cuh"
#include "gpu/device.hpp"

namespace af::gpu {
namespace {

// --- cuDNN descriptors, owned -------------------------------------------

struct tensor_desc {
  cudnnTensorDescriptor_t d = nullptr;
  tensor_desc() { AF_CUDA_CHECK(cudnnCreateTensorDescriptor(&d)); }
  tensor_desc(int n, int c, int h, int w) : tensor_desc() {
    AF_CUDA_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW,
                                             CUDNN_DATA_FLOAT, n, c, h, w));
  }
  ~tensor_desc() { cudnnDestroyTensorDescriptor(d); }
  tensor_desc(const tensor_desc&) = delete;
  tensor_desc& operator=(const tensor_desc&) = delete;
};

struct filter_desc {
  cudnnFilterDescriptor_t d = nullptr;
  filter_desc(int k, int c, int r, int s) {
    AF_CUDA_CHECK(cudnnCreateFilterDescriptor(&d));
    AF_CUDA_CHECK(cudnnSetFilter4dDescriptor(d, CUDNN_DATA_FLOAT,
                                             CUDNN_TENSOR_NCHW, k, c, r, s));
  }
  ~filter_desc() { cudnnDestroyFilterDescriptor(d); }
  filter_desc(const filter_desc&) = delete;
  filter_desc& operator=(const filter_desc&) = delete;
};

struct conv_desc {
  cudnnConvolutionDescriptor_t d = nullptr;
  conv_desc(int pad, int stride, cudnnMathType_t math) {
    AF_CUDA_CHECK(cudnnCreateConvolutionDescriptor(&d));
    AF_CUDA_CHECK(cudnnSetConvolution2dDescriptor(d, pad, pad, stride, stride,
                                                  1, 1, CUDNN_CROSS_CORRELATION,
                                                  CUDNN_DATA_FLOAT));
    // CUDNN_FMA_MATH for fp32: no TF32 tensor cores (cuDNN's default on
    // sm_80+), so that float32 results agree with the CPU device's.
    AF_CUDA_CHECK(cudnnSetConvolutionMathType(d, math));
  }
  ~conv_desc() { cudnnDestroyConvolutionDescriptor(d); }
  conv_desc(const conv_desc&) = delete;
  conv_desc& operator=(const conv_desc&) = delete;
};

struct pool_desc {
  cudnnPoolingDescriptor_t d = nullptr;
  pool_desc(int window, int stride) {
    AF_CUDA_CHECK(cudnnCreatePoolingDescriptor(&d));
    AF_CUDA_CHECK(cudnnSetPooling2dDescriptor(
      d, CUDNN_POOLING_MAX_DETERMINISTIC, CUDNN_NOT_PROPAGATE_NAN, window,
      window, 0, 0, stride, stride));
  }
  ~pool_desc() { cudnnDestroyPoolingDescriptor(d); }
  pool_desc(const pool_desc&) = delete;
  pool_desc& operator=(const pool_desc&) = delete;
};

// --- convolution algorithms -------------------------------------------

// Larger workspaces than this rule an algorithm out.
constexpr size_t max_workspace = size_t{256} << 20;

// The first of cuDNN's heuristic ranking that runs, is deterministic (so a
// run can be repeated exactly), fits the workspace cap and computes as
// asked: plain float32, or (tensor_ops) TF32 tensor cores too. Never
// CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, which rounds to FP16. nullptr
// when none does.
template <class Perf>
const Perf* pick(const Perf* perf, int count, bool tensor_ops) {
  for (int i = 0; i < count; ++i) {
    const Perf& p = perf[i];
    if (p.status == CUDNN_STATUS_SUCCESS && p.determinism == CUDNN_DETERMINISTIC
        && p.memory <= max_workspace
        && p.mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION
        && (tensor_ops || p.mathType != CUDNN_TENSOR_OP_MATH))
      return &p;
  }
  return nullptr;
}

// The math type to run a picked algorithm with: the one cuDNN ranked it
// with when tensor cores are allowed; otherwise CUDNN_FMA_MATH, whatever
// the ranking said (CUDNN_DEFAULT_MATH would permit TF32 on sm_80+).
inline cudnnMathType_t math_for(cudnnMathType_t ranked, bool tensor_ops) {
  return tensor_ops ? ranked : CUDNN_FMA_MATH;
}

// Descriptors and algorithms for one convolution shape, found once.
struct conv_plan {
  tensor_desc x, y, bias;
  filter_desc w;
  conv_desc conv;
  cudnnConvolutionFwdAlgo_t fwd = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnConvolutionBwdDataAlgo_t bwd_data = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter =
    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  size_t fwd_bytes = 0, bwd_data_bytes = 0, bwd_filter_bytes = 0;
  // Each algorithm runs with the math type cuDNN ranked it with (set on
  // the shared descriptor before each call).
  const cudnnMathType_t base_math;
  cudnnMathType_t fwd_math, bwd_data_math, bwd_filter_math;

  // tensor_ops: TF32 tensor cores allowed (precision tf32 and bf16).
  conv_plan(cudnnHandle_t h, const conv2d_shape& s, bool tensor_ops)
    : x(s.n, s.c, s.h, s.w), y(s.n, s.k, s.out_h(), s.out_w()),
      bias(1, s.k, 1, 1), w(s.k, s.c, s.r, s.s),
      conv(s.pad, s.stride, tensor_ops ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH),
      base_math(tensor_ops ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH),
      fwd_math(base_math), bwd_data_math(base_math),
      bwd_filter_math(base_math) {
    int n = 0, k = 0, oh = 0, ow = 0;
    AF_CUDA_CHECK(cudnnGetConvolution2dForwardOutputDim(conv.d, x.d, w.d, &n,
                                                        &k, &oh, &ow));
    if (n != s.n || k != s.k || oh != s.out_h() || ow != s.out_w())
      throw std::runtime_error("conv2d: cuDNN's output shape differs from "
                               "conv2d_shape's");

    constexpr int max_algos = 16;
    int count = 0;
    {
      cudnnConvolutionFwdAlgoPerf_t perf[max_algos];
      AF_CUDA_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
        h, x.d, w.d, conv.d, y.d, max_algos, &count, perf));
      if (const auto* p = pick(perf, count, tensor_ops)) {
        fwd = p->algo;
        fwd_math = math_for(p->mathType, tensor_ops);
      }
      AF_CUDA_CHECK(cudnnSetConvolutionMathType(conv.d, fwd_math));
      AF_CUDA_CHECK(cudnnGetConvolutionForwardWorkspaceSize(
        h, x.d, w.d, conv.d, y.d, fwd, &fwd_bytes));
    }
    {
      cudnnConvolutionBwdDataAlgoPerf_t perf[max_algos];
      // Each search starts from the mode's math type, not the one the
      // search before it left on the descriptor.
      AF_CUDA_CHECK(cudnnSetConvolutionMathType(conv.d, base_math));
      AF_CUDA_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        h, w.d, y.d, conv.d, x.d, max_algos, &count, perf));
      if (const auto* p = pick(perf, count, tensor_ops)) {
        bwd_data = p->algo;
        bwd_data_math = math_for(p->mathType, tensor_ops);
      }
      AF_CUDA_CHECK(cudnnSetConvolutionMathType(conv.d, bwd_data_math));
      AF_CUDA_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(
        h, w.d, y.d, conv.d, x.d, bwd_data, &bwd_data_bytes));
    }
    {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[max_algos];
      AF_CUDA_CHECK(cudnnSetConvolutionMathType(conv.d, base_math));
      AF_CUDA_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        h, x.d, y.d, conv.d, w.d, max_algos, &count, perf));
      if (const auto* p = pick(perf, count, tensor_ops)) {
        bwd_filter = p->algo;
        bwd_filter_math = math_for(p->mathType, tensor_ops);
      }
      AF_CUDA_CHECK(cudnnSetConvolutionMathType(conv.d, bwd_filter_math));
      AF_CUDA_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
        h, x.d, y.d, conv.d, w.d, bwd_filter, &bwd_filter_bytes));
    }
  }
};

struct pool_plan {
  tensor_desc x, y;
  pool_desc pool;
  explicit pool_plan(const pool_shape& s)
    : x(s.n, s.c, s.h, s.w), y(s.n, s.c, s.out_h(), s.out_w()),
      pool(s.window, s.stride) {}
};

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
