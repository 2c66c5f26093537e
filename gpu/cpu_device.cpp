// The CPU device: OpenBLAS (one thread unless CPU trainers share the cores
// out, gpu/cpu_threads.hpp) for GEMM and AXPY, convolution as im2col + GEMM, plain loops
// for the rest. Every call runs to completion before it returns, so the
// asynchronous parts of the interface are plain copies and no-ops.
#include <cblas.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <utility>
#include <vector>

#include "actorflow/gpu/cpu_loops.hpp"
#include "actorflow/gpu/cpu_threads.hpp"
#include "actorflow/gpu/device.hpp"
#include "actorflow/runtime/core/random.hpp"

namespace af::gpu {

namespace {

constexpr size_t alignment = 64; // a cache line; enough for any SIMD load

void* aligned_allocate(size_t bytes, const char* call) {
  if (bytes > SIZE_MAX - alignment)
    throw std::runtime_error(std::string("cpu device: ") + call + "("
                             + std::to_string(bytes) + " bytes): too large");
  // aligned_alloc wants a multiple of the alignment; 0 bytes still gets a
  // real pointer (the interface never returns nullptr).
  size_t rounded =
    std::max(alignment, (bytes + alignment - 1) / alignment * alignment);
  void* p = std::aligned_alloc(alignment, rounded);
  if (p == nullptr)
    throw std::runtime_error(std::string("cpu device: ") + call + "("
                             + std::to_string(bytes)
                             + " bytes): out of memory");
  return p;
}


/// Chunks of samples for the convolution GEMMs (see conv2d_forward). A
/// GEMM with a few dozen columns runs well below OpenBLAS's peak, one
/// with a hundred or more near it; merging samples costs a reordering
/// copy. So a chunk gets about chunk_columns output positions (a sample
/// with that many or more goes alone, in place), and its workspace (im2col
/// matrix and GEMM result) at most chunk_budget_floats, to stay in a
/// core's L2 (2 MiB here) beside the filters and OpenBLAS's packed panels.
constexpr size_t chunk_columns = 128;
constexpr size_t chunk_budget_floats = (size_t{512} << 10) / sizeof(float);

/// Samples per chunk for `n` samples of `positions` output positions and
/// `per_sample` floats of workspace each: spread evenly over the chunks,
/// so the last one is not a sliver.
int chunk_samples(int n, size_t positions, size_t per_sample) noexcept {
  size_t want =
    std::max<size_t>(1, chunk_columns / std::max<size_t>(1, positions));
  size_t fit =
    std::max<size_t>(1, chunk_budget_floats / std::max<size_t>(1, per_sample));
  int most = static_cast<int>(std::min({want, fit, static_cast<size_t>(n)}));
  int chunks = (n + most - 1) / most;
  return (n + chunks - 1) / chunks;
}

/// A 1x1 filter with stride 1 and no padding sees the image itself.
bool is_pointwise(const conv2d_shape& s) noexcept {
  return s.r == 1 && s.s == 1 && s.stride == 1 && s.pad == 0;
}

// Separate arrays: stated, so the loop vectorises (the backward pass of
// every ReLU runs it over the whole activation). dy is read whatever the
// sign of y: a load under the condition keeps the loop scalar, with a
// branch that mispredicts half the time.
void relu_mask(const float* __restrict__ y, const float* __restrict__ dy,
               float* __restrict__ dx, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    float g = dy[i];
    dx[i] = y[i] > 0 ? g : 0.0f;
  }
}


class cpu_device final : public device {
public:
  cpu_device() {
    blas_default_once(); // a CPU trainer sizes it (gpu/cpu_threads.hpp)
  }

  std::string name() const override { return "cpu"; }
  bool is_cuda() const noexcept override { return false; }
  int ordinal() const noexcept override { return -1; }

  void set_precision(precision p) override {
    if (p != precision::fp32)
      throw std::invalid_argument(
        std::string("the cpu device computes in fp32 only; precision \"")
        + precision_name(p) + "\" needs a CUDA device");
  }

  // --- memory ---------------------------------------------------------

  void* allocate(size_t bytes) override {
    return aligned_allocate(bytes, "allocate");
  }
  void deallocate(void* p) noexcept override { std::free(p); }
  void* allocate_host(size_t bytes) override {
    return aligned_allocate(bytes, "allocate_host");
  }
  void deallocate_host(void* p) noexcept override { std::free(p); }

  void upload(void* dst, const void* src, size_t bytes) override {
    timed(&device_times::param_upload, [&] { copy(dst, src, bytes); });
  }
  void upload_async(void* dst, const void* src, size_t bytes) override {
    timed(&device_times::input_upload, [&] { copy(dst, src, bytes); });
  }
  void wait_uploads() override {}
  void download(void* dst, const void* src, size_t bytes) override {
    timed(&device_times::download, [&] { copy(dst, src, bytes); });
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0 && dst != src)
      std::memmove(dst, src, bytes);
  }
  void copy_columns(float* dst, int dst_stride, const float* src,
                    int src_stride, int rows, int width) override {
    for (int i = 0; i < rows; ++i)
      std::copy_n(src + static_cast<size_t>(i) * src_stride, width,
                  dst + static_cast<size_t>(i) * dst_stride);
  }
  void fill(float* x, size_t n, float value) override {
    std::fill_n(x, n, value);
  }
  void sync() override {}

  // --- timing ---------------------------------------------------------

  void set_timing(bool on) override {
    timing_ = on;
    in_compute_ = false;
  }
  void compute_begin() override {
    if (!timing_)
      return;
    in_compute_ = true;
    compute_from_ = clock::now();
  }
  void compute_end() override {
    if (!timing_ || !in_compute_)
      return;
    times_.compute += seconds_since(compute_from_);
    in_compute_ = false;
  }
  device_times take_times() override { return std::exchange(times_, {}); }

  // --- dense algebra --------------------------------------------------

  void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a,
            const float* b, float beta, float* c) override {
    if (m <= 0 || n <= 0)
      return;
    if (k <= 0) {
      // BLAS would reject the leading dimensions; op(A) op(B) is 0.
      auto count = static_cast<size_t>(m) * static_cast<size_t>(n);
      if (beta == 0)
        std::fill_n(c, count, 0.0f);
      else
        for (size_t i = 0; i < count; ++i)
          c[i] *= beta;
      return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, ta ? m : k,
                b, tb ? k : n, beta, c, n);
  }

  void axpy(size_t n, float alpha, const float* x, float* y) override {
    // cblas counts in int; larger arrays go in slices.
    constexpr size_t slice = INT_MAX;
    for (size_t i = 0; i < n; i += slice)
      cblas_saxpy(static_cast<int>(std::min(slice, n - i)), alpha, x + i, 1,
                  y + i, 1);
  }

  void add_bias(float* y, const float* b, int m, int n) override {
    for (int i = 0; i < m; ++i) {
      float* row = y + static_cast<size_t>(i) * n;
      for (int j = 0; j < n; ++j)
        row[j] += b[j];
    }
  }

  void bias_grad(const float* dy, float* db, int m, int n) override {
    for (int i = 0; i < m; ++i) {
      const float* row = dy + static_cast<size_t>(i) * n;
      for (int j = 0; j < n; ++j)
        db[j] += row[j];
    }
  }

  void mul(const float* a, const float* b, float* y, size_t n) override {
    for (size_t i = 0; i < n; ++i)
      y[i] = a[i] * b[i];
  }

  void hwc_to_chw(const float* x, float* y, int n, int h, int w,
                  int c) override {
    auto plane = static_cast<size_t>(h) * w;
    for (size_t i = 0; i < static_cast<size_t>(n); ++i)
      for (size_t p = 0; p < plane; ++p)
        for (size_t k = 0; k < static_cast<size_t>(c); ++k)
          y[(i * c + k) * plane + p] = x[(i * plane + p) * c + k];
  }

  // --- layers ---------------------------------------------------------

  void relu_forward(const float* x, float* y, size_t n) override {
    for (size_t i = 0; i < n; ++i) {
      float v = x[i];
      y[i] = v > 0 ? v : 0.0f;
    }
  }

  void relu_backward(const float* y, const float* dy, float* dx,
                     size_t n) override {
    relu_mask(y, dy, dx, n);
  }

  // Convolution in chunks of samples: im2col of the whole chunk side by
  // side in one matrix col [taps, chunk*positions], then one GEMM per chunk
  // for each product, so the filters are packed once per chunk and each
  // GEMM is wide. The GEMM results are [k, chunk, positions] while images
  // are [chunk, k, positions]: a copy per chunk reorders them (adding the
  // bias on the way forward, where the sums for db are taken on the way
  // back). A chunk of one sample needs no reordering and uses y and dy in
  // place; so does a 1x1 filter (its col is the image itself), which
  // always goes one sample at a time.

  void conv2d_forward(const conv2d_shape& s, const float* x, const float* w,
                      const float* b, float* y) override {
    if (s.n <= 0)
      return;
    size_t in = image_size(s), out = out_size(s);
    int taps = s.c * s.r * s.s, positions = s.out_h() * s.out_w();
    auto pos = static_cast<size_t>(positions);
    bool pointwise = is_pointwise(s);
    int chunk = pointwise ? 1 : chunk_samples(s.n, pos, (taps + s.k) * pos);
    size_t columns = static_cast<size_t>(chunk) * pos;
    float* col = pointwise ? nullptr : workspace(col_, taps * columns);
    float* res = chunk == 1 ? nullptr : workspace(res_, s.k * columns);
    for (int n0 = 0; n0 < s.n; n0 += chunk) {
      int nb = std::min(chunk, s.n - n0);
      size_t ld = static_cast<size_t>(nb) * pos;
      for (int i = 0; !pointwise && i < nb; ++i)
        cpu::im2col(s, x + (n0 + i) * in, col + i * pos, ld);
      // [k, nb*positions] = w [k, taps] col [taps, nb*positions]
      float* yc = nb == 1 ? y + n0 * out : res;
      gemm(false, false, s.k, static_cast<int>(ld), taps, 1.0f, w,
           pointwise ? x + n0 * in : col, 0.0f, yc);
      if (nb == 1) {
        if (b != nullptr)
          add_plane_bias(yc, b, s.k, pos);
        continue;
      }
      for (int i = 0; i < nb; ++i)
        for (int f = 0; f < s.k; ++f) {
          const float* __restrict__ src = res + f * ld + i * pos;
          float* __restrict__ dst = y + (n0 + i) * out + f * pos;
          float bias = b != nullptr ? b[f] : 0.0f;
          for (size_t j = 0; j < pos; ++j)
            dst[j] = src[j] + bias;
        }
    }
  }

  void conv2d_backward(const conv2d_shape& s, const float* x, const float* w,
                       const float* dy, float* dx, float* dw,
                       float* db) override {
    size_t in = image_size(s), out = out_size(s);
    int taps = s.c * s.r * s.s, positions = s.out_h() * s.out_w();
    auto pos = static_cast<size_t>(positions);
    if (db != nullptr)
      std::fill_n(db, s.k, 0.0f);
    if (s.n <= 0) {
      std::fill_n(dw, static_cast<size_t>(s.k) * taps, 0.0f);
      return;
    }
    bool pointwise = is_pointwise(s);
    int chunk = pointwise ? 1 : chunk_samples(s.n, pos, (taps + s.k) * pos);
    size_t columns = static_cast<size_t>(chunk) * pos;
    // col holds im2col(x) and then, once dw has it, dcol.
    float* col = pointwise ? nullptr : workspace(col_, taps * columns);
    float* dyt = chunk == 1 ? nullptr : workspace(res_, s.k * columns);
    for (int n0 = 0; n0 < s.n; n0 += chunk) {
      int nb = std::min(chunk, s.n - n0);
      size_t ld = static_cast<size_t>(nb) * pos;
      for (int i = 0; !pointwise && i < nb; ++i)
        cpu::im2col(s, x + (n0 + i) * in, col + i * pos, ld);
      // dyc [k, nb*positions]: the chunk's dy, filter-major.
      const float* dyc = nb == 1 ? dy + n0 * out : dyt;
      for (int i = 0; nb > 1 && i < nb; ++i)
        for (int f = 0; f < s.k; ++f) {
          const float* __restrict__ src = dy + (n0 + i) * out + f * pos;
          float* __restrict__ dst = dyt + f * ld + i * pos;
          for (size_t j = 0; j < pos; ++j)
            dst[j] = src[j];
        }
      if (db != nullptr)
        add_plane_sums(dyc, db, s.k, ld);
      // dw [k, taps] (+)= dyc [k, nb*positions] col^T [nb*positions, taps]
      gemm(false, true, s.k, taps, static_cast<int>(ld), 1.0f, dyc,
           pointwise ? x + n0 * in : col, n0 == 0 ? 0.0f : 1.0f, dw);
      if (dx == nullptr)
        continue;
      // dcol [taps, nb*positions] = w^T [taps, k] dyc [k, nb*positions];
      // for a 1x1 filter, dcol is dx.
      gemm(true, false, taps, static_cast<int>(ld), s.k, 1.0f, w, dyc, 0.0f,
           pointwise ? dx + n0 * in : col);
      for (int i = 0; !pointwise && i < nb; ++i) {
        float* dxi = dx + (n0 + i) * in;
        std::fill_n(dxi, in, 0.0f);
        cpu::col2im(s, col + i * pos, ld, dxi);
      }
    }
  }

  void maxpool_forward(const pool_shape& s, const float* x, float* y) override {
    if (s.window == 2 && s.stride == 2) {
      cpu::maxpool2x2_forward(s, x, y);
      return;
    }
    int oh = s.out_h(), ow = s.out_w();
    size_t planes = static_cast<size_t>(s.n) * s.c;
    for (size_t p = 0; p < planes; ++p) {
      const float* xp = x + p * s.h * s.w;
      float* yp = y + p * oh * ow;
      for (int oy = 0; oy < oh; ++oy)
        for (int ox = 0; ox < ow; ++ox)
          yp[oy * ow + ox] = xp[argmax(s, xp, oy, ox)];
    }
  }

  void maxpool_backward(const pool_shape& s, const float* x, const float*,
                        const float* dy, float* dx) override {
    // The argmax is found again from x rather than matched against y, so
    // ties go to the first maximum exactly as in forward.
    if (s.window == 2 && s.stride == 2) {
      cpu::maxpool2x2_backward(s, x, dy, dx);
      return;
    }
    int oh = s.out_h(), ow = s.out_w();
    size_t planes = static_cast<size_t>(s.n) * s.c;
    std::fill_n(dx, planes * s.h * s.w, 0.0f);
    for (size_t p = 0; p < planes; ++p) {
      const float* xp = x + p * s.h * s.w;
      float* dxp = dx + p * s.h * s.w;
      const float* dyp = dy + p * oh * ow;
      for (int oy = 0; oy < oh; ++oy)
        for (int ox = 0; ox < ow; ++ox)
          dxp[argmax(s, xp, oy, ox)] += dyp[oy * ow + ox];
    }
  }

  void dropout_forward(float p, uint64_t seed, const float* x, float* mask,
                       float* y, size_t n) override {
    float keep = 1.0f / (1.0f - p);
    for (size_t i = 0; i < n; ++i) {
      double u = static_cast<double>(mix64(seed ^ mix64(i)) >> 11) * 0x1.0p-53;
      mask[i] = u < p ? 0.0f : keep;
      y[i] = x[i] * mask[i];
    }
  }

  void gather_rows(const float* table, const int32_t* idx, float* out, int m,
                   int d) override {
    for (int i = 0; i < m; ++i)
      std::copy_n(table + static_cast<size_t>(idx[i]) * d, d,
                  out + static_cast<size_t>(i) * d);
  }

  void scatter_add_rows(const float* dout, const int32_t* idx,
                        float* table_grad, int m, int d) override {
    for (int i = 0; i < m; ++i) {
      const float* src = dout + static_cast<size_t>(i) * d;
      float* dst = table_grad + static_cast<size_t>(idx[i]) * d;
      for (int j = 0; j < d; ++j)
        dst[j] += src[j];
    }
  }

  // --- losses ---------------------------------------------------------

  void softmax_xent(const float* logits, const int32_t* labels, int m, int c,
                    float* loss, float* dlogits, float scale) override {
    for (int i = 0; i < m; ++i) {
      const float* z = logits + static_cast<size_t>(i) * c;
      float top = *std::max_element(z, z + c);
      double sum = 0;
      for (int j = 0; j < c; ++j)
        sum += std::exp(static_cast<double>(z[j] - top));
      // log sum exp, shifted by the maximum so no exp overflows
      double lse = top + std::log(sum);
      loss[i] = static_cast<float>(lse - z[labels[i]]);
      float* g = dlogits + static_cast<size_t>(i) * c;
      for (int j = 0; j < c; ++j) {
        double prob = std::exp(static_cast<double>(z[j]) - lse);
        g[j] = static_cast<float>(scale * (prob - (j == labels[i] ? 1 : 0)));
      }
    }
  }

  void sigmoid_bce(const float* logits, const float* labels, int m, float* loss,
                   float* dlogits, float scale) override {
    for (int i = 0; i < m; ++i) {
      double z = logits[i], y = labels[i];
      // log(1 + exp(-|z|)) never overflows; the rest is exact algebra of
      // -y log(sigmoid z) - (1 - y) log(1 - sigmoid z).
      double e = std::exp(-std::abs(z));
      loss[i] = static_cast<float>(std::max(z, 0.0) - z * y + std::log1p(e));
      double sig = z >= 0 ? 1 / (1 + e) : e / (1 + e);
      dlogits[i] = static_cast<float>(scale * (sig - y));
    }
  }

private:
  using clock = std::chrono::steady_clock;

  static double seconds_since(clock::time_point t) {
    return std::chrono::duration<double>(clock::now() - t).count();
  }

  // Runs f, adding its time to `kind` while timing and outside a compute
  // span (there it is compute).
  template <class F>
  void timed(double device_times::*kind, F&& f) {
    if (!timing_ || in_compute_) {
      f();
      return;
    }
    auto from = clock::now();
    f();
    times_.*kind += seconds_since(from);
  }

  bool timing_ = false, in_compute_ = false;
  clock::time_point compute_from_{};
  device_times times_;

  static size_t image_size(const conv2d_shape& s) noexcept {
    return static_cast<size_t>(s.c) * s.h * s.w;
  }
  static size_t out_size(const conv2d_shape& s) noexcept {
    return static_cast<size_t>(s.k) * s.out_h() * s.out_w();
  }
  /// A workspace of at least `need` floats, kept across calls so steps
  /// do not allocate once the largest layer has run (bounded by
  /// chunk_budget_floats, or one sample's worth when that is larger).
  static float* workspace(std::vector<float>& buf, size_t need) {
    if (buf.size() < need)
      buf.resize(need);
    return buf.data();
  }
  /// y [k, positions] += b[f] on plane f.
  static void add_plane_bias(float* __restrict__ y, const float* __restrict__ b,
                             int k, size_t positions) noexcept {
    for (int f = 0; f < k; ++f) {
      float* plane = y + f * positions;
      float bias = b[f];
      for (size_t j = 0; j < positions; ++j)
        plane[j] += bias;
    }
  }
  /// db[f] += sum of row f of dy [k, positions].
  static void add_plane_sums(const float* __restrict__ dy,
                             float* __restrict__ db, int k,
                             size_t positions) noexcept {
    // 8 partial sums: the loop vectorises without reassociating floats.
    constexpr size_t lanes = 8;
    for (int f = 0; f < k; ++f) {
      const float* plane = dy + f * positions;
      float acc[lanes] = {};
      size_t j = 0;
      for (; j + lanes <= positions; j += lanes)
        for (size_t l = 0; l < lanes; ++l)
          acc[l] += plane[j + l];
      float sum = 0;
      for (; j < positions; ++j)
        sum += plane[j];
      for (size_t l = 0; l < lanes; ++l)
        sum += acc[l];
      db[f] += sum;
    }
  }
  /// Flat index in the plane of the first maximum of window (oy, ox).
  static size_t argmax(const pool_shape& s, const float* plane, int oy,
                       int ox) noexcept {
    size_t y0 = static_cast<size_t>(oy) * s.stride;
    size_t x0 = static_cast<size_t>(ox) * s.stride;
    size_t best = y0 * s.w + x0;
    for (int dy = 0; dy < s.window; ++dy)
      for (int dx = 0; dx < s.window; ++dx) {
        size_t at = (y0 + dy) * s.w + x0 + dx;
        if (plane[at] > plane[best])
          best = at;
      }
    return best;
  }

  // conv2d workspaces: a chunk's im2col (and, backward, dcol) matrix, and
  // its GEMM result (forward) or reordered dy (backward).
  std::vector<float> col_, res_;
};

} // namespace

std::unique_ptr<device> make_cpu_device() {
  return std::make_unique<cpu_device>();
}

} // namespace af::gpu
