// The compute device: the few primitives that layers (gpu/layers.hpp) are
// built from, with two implementations: the CPU device (OpenBLAS for GEMM,
// loops where no library call fits) and the CUDA device (cuBLAS, cuDNN,
// a few kernels of our own). Layers never know which one they run on.
//
// Conventions, for every call:
// - Pointers are device memory of *this* device (from allocate()), except
//   the host side of upload/download. Matrices are row-major.
// - Calls are ordered: on CUDA they are queued on the device's compute
//   stream and return at once; download() and sync() wait.
// - Images are NCHW float32. Integer inputs (labels, embedding rows) are
//   int32.
// - Errors (out of device memory, a CUDA/cuDNN failure) throw
//   std::runtime_error naming the call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace af::gpu {

/// Shape of a 2-d convolution: x [n, c, h, w], w [k, c, r, s],
/// y [n, k, out_h(), out_w()].
struct conv2d_shape {
  int n = 0, c = 0, h = 0, w = 0; // input
  int k = 0, r = 0, s = 0;        // filters
  int stride = 1, pad = 0;
  int out_h() const noexcept { return (h + 2 * pad - r) / stride + 1; }
  int out_w() const noexcept { return (w + 2 * pad - s) / stride + 1; }
};

/// How a device multiplies float32 data (the trainer's `precision`).
/// Parameters, activations and gradients are float32 in every mode.
enum class precision {
  fp32, ///< IEEE float32 arithmetic (every device).
  tf32, ///< GEMMs and convolutions on tensor cores with inputs rounded to
        ///< TF32 (10-bit mantissa), accumulated in float32 (CUDA).
  bf16, ///< GEMMs with inputs rounded to bfloat16 (7 mantissa bits),
        ///< accumulated in float32; convolutions as tf32 (CUDA).
};

/// "fp32", "tf32" or "bf16" -> the mode; false for anything else.
bool parse_precision(std::string_view name, precision& out) noexcept;
const char* precision_name(precision p) noexcept;

/// Max pooling without padding: x [n, c, h, w] -> y [n, c, out_h(), out_w()].
struct pool_shape {
  int n = 0, c = 0, h = 0, w = 0;
  int window = 2, stride = 2;
  int out_h() const noexcept { return (h - window) / stride + 1; }
  int out_w() const noexcept { return (w - window) / stride + 1; }
};

/// Device time by kind of work, in seconds (device::take_times).
struct device_times {
  double input_upload = 0; ///< upload_async (overlaps compute on CUDA)
  double param_upload = 0; ///< upload
  double download = 0;     ///< download
  double compute = 0;      ///< spans between compute_begin and compute_end
};

class device {
public:
  virtual ~device();

  /// "cpu" or "cuda:N (name of the GPU)".
  virtual std::string name() const = 0;
  virtual bool is_cuda() const noexcept = 0;
  /// The N of "cuda:N"; -1 for the CPU.
  virtual int ordinal() const noexcept = 0;

  /// Sets how later GEMMs and convolutions compute (fp32 until called).
  /// Throws std::invalid_argument for a mode this device lacks: the CPU
  /// device has fp32 only.
  virtual void set_precision(precision p) = 0;

  // --- memory ----------------------------------------------------------
  /// Device memory; never nullptr (throws). Uninitialised.
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* p) noexcept = 0;
  /// Host memory that uploads can read asynchronously (page-locked on
  /// CUDA, plain on the CPU).
  virtual void* allocate_host(size_t bytes) = 0;
  virtual void deallocate_host(void* p) noexcept = 0;
  /// Host -> device, ordered with compute (the source may be reused when
  /// the call returns).
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  /// Host (from allocate_host) -> device on the copy stream, overlapping
  /// compute; `src` must stay untouched until wait_uploads() returned.
  virtual void upload_async(void* dst, const void* src, size_t bytes) = 0;
  /// Compute issued after this call sees every upload_async so far.
  virtual void wait_uploads() = 0;
  /// Device -> host; waits for everything queued before it.
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void fill(float* x, size_t n, float value) = 0;
  /// Waits until every queued call finished.
  virtual void sync() = 0;

  // --- timing (the trainer's step breakdown) --------------------------
  /// While on, the device times its uploads, downloads and the spans
  /// between compute_begin() and compute_end(). Copies inside such a span
  /// are not timed on their own: upload and download are part of the
  /// span's time (on CUDA they run on the compute stream); upload_async
  /// inside a span is counted nowhere on CUDA (copy stream). CUDA: events on the stream the
  /// work runs on, so it is the GPU's time, not the host's. CPU: the host
  /// clock (every call completes before it returns). Off by default: an
  /// event pair costs a few microseconds.
  virtual void set_timing(bool on) = 0;
  virtual void compute_begin() = 0;
  virtual void compute_end() = 0;
  /// The times of the timed work that finished since the last call (CUDA:
  /// work still running is counted by a later call).
  virtual device_times take_times() = 0;

  // --- dense algebra ---------------------------------------------------
  /// C[m,n] = alpha * op(A) op(B) + beta * C, op(A) [m,k], op(B) [k,n];
  /// `ta`/`tb`: A/B are stored transposed ([k,m] / [n,k]).
  virtual void gemm(bool ta, bool tb, int m, int n, int k, float alpha,
                    const float* a, const float* b, float beta, float* c) = 0;
  /// y += alpha * x.
  virtual void axpy(size_t n, float alpha, const float* x, float* y) = 0;
  /// y[i, j] += b[j] for m rows of n.
  virtual void add_bias(float* y, const float* b, int m, int n) = 0;
  /// db[j] += sum_i dy[i, j].
  virtual void bias_grad(const float* dy, float* db, int m, int n) = 0;
  /// y = a * b elementwise.
  virtual void mul(const float* a, const float* b, float* y, size_t n) = 0;
  /// n images from [h, w, c] (image_decode's layout) to [c, h, w]
  /// (conv2d's): y[i, k, r, q] = x[i, r, q, k]. `x` may be device memory
  /// that another stream of this GPU wrote, once that stream finished.
  virtual void hwc_to_chw(const float* x, float* y, int n, int h, int w,
                          int c) = 0;

  // --- layers ----------------------------------------------------------
  virtual void relu_forward(const float* x, float* y, size_t n) = 0;
  /// dx = dy where y > 0, else 0.
  virtual void relu_backward(const float* y, const float* dy, float* dx,
                             size_t n) = 0;
  /// y = conv(x, w) + b (b [k], may be nullptr).
  virtual void conv2d_forward(const conv2d_shape& s, const float* x,
                              const float* w, const float* b, float* y) = 0;
  /// Sets dw [k,c,r,s] and db [k] (db may be nullptr) to the gradients of
  /// this batch, and dx (may be nullptr: the first layer needs none).
  virtual void conv2d_backward(const conv2d_shape& s, const float* x,
                               const float* w, const float* dy, float* dx,
                               float* dw, float* db) = 0;
  virtual void maxpool_forward(const pool_shape& s, const float* x,
                               float* y) = 0;
  /// dx gets dy at each window's maximum (ties: the first), 0 elsewhere.
  virtual void maxpool_backward(const pool_shape& s, const float* x,
                                const float* y, const float* dy,
                                float* dx) = 0;
  /// mask[i] = 0 with probability p, else 1 / (1 - p), drawn from
  /// (seed, i) only (the same on every device); y = x * mask.
  /// Every device computes exactly, with mix64 from runtime/core/random.hpp
  /// and i the element index as uint64_t:
  ///   u = double(mix64(seed ^ mix64(i)) >> 11) * 2^-53   // in [0, 1)
  ///   mask[i] = u < double(p) ? 0.0f : 1.0f / (1.0f - p) // float divide
  virtual void dropout_forward(float p, uint64_t seed, const float* x,
                               float* mask, float* y, size_t n) = 0;
  /// out[i, :] = table[idx[i], :], idx [m] int32, rows of d floats.
  virtual void gather_rows(const float* table, const int32_t* idx,
                           float* out, int m, int d) = 0;
  /// table_grad[idx[i], :] += dout[i, :] (repeated indices add up).
  virtual void scatter_add_rows(const float* dout, const int32_t* idx,
                                float* table_grad, int m, int d) = 0;
  /// dst[i * dst_stride + j] = src[i * src_stride + j] for `rows` rows of
  /// `width` floats: a block of columns from one row-major matrix to
  /// another (concatenating features). The two must not overlap.
  virtual void copy_columns(float* dst, int dst_stride, const float* src,
                            int src_stride, int rows, int width) = 0;

  // --- losses ----------------------------------------------------------
  /// Softmax cross-entropy of logits [m, c] against labels [m] (int32 in
  /// [0, c)): loss[i] per sample, dlogits = scale * (softmax - onehot).
  virtual void softmax_xent(const float* logits, const int32_t* labels,
                            int m, int c, float* loss, float* dlogits,
                            float scale) = 0;
  /// Sigmoid binary cross-entropy of logits [m] against labels [m] in
  /// {0, 1} (float): loss[i], dlogits = scale * (sigmoid - label).
  /// Numerically stable for large |logit|.
  virtual void sigmoid_bce(const float* logits, const float* labels, int m,
                           float* loss, float* dlogits, float scale) = 0;
};

/// The CPU device. OpenBLAS runs single-threaded inside it (trainers are
/// the unit of parallelism).
std::unique_ptr<device> make_cpu_device();

/// Whether the CUDA device was built and a GPU is present; when false,
/// `why` says which of the two is missing.
bool cuda_available(std::string* why = nullptr);

/// The CUDA device on GPU `ordinal`, with its own compute and copy
/// streams. Throws std::runtime_error when cuda_available() is false.
std::unique_ptr<device> make_cuda_device(int ordinal = 0);

/// "cpu", "cuda" (= "cuda:0") or "cuda:N"; throws std::invalid_argument
/// for anything else, std::runtime_error when CUDA is not available.
std::unique_ptr<device> make_device(const std::string& spec);

/// Device memory that frees itself. Move-only.
class darray {
public:
  darray() = default;
  darray(device& dev, size_t bytes);
  darray(darray&& other) noexcept;
  darray& operator=(darray&& other) noexcept;
  darray(const darray&) = delete;
  darray& operator=(const darray&) = delete;
  ~darray();

  /// Reallocates when more than the current capacity is needed; the
  /// contents are then undefined.
  void reserve(device& dev, size_t bytes);
  size_t bytes() const noexcept { return bytes_; }
  void* get() const noexcept { return ptr_; }
  float* f32() const noexcept { return static_cast<float*>(ptr_); }
  int32_t* i32() const noexcept { return static_cast<int32_t*>(ptr_); }

private:
  device* dev_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

} // namespace af::gpu
