// The CPU device: OpenBLAS (single-threaded; trainers are the unit of
// parallelism) for GEMM and AXPY, convolution as im2col + GEMM, plain loops
// for the rest. Every call runs to completion before it returns, so the
// asynchronous parts of the interface are plain copies and no-ops.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "gpu/device.hpp"
#include "runtime/random.hpp"

extern "C" void openblas_set_num_threads(int);

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

/// The outputs o in [lo, hi) whose input o * stride + offset lies in
/// [0, size).
struct out_range {
  int lo, hi;
};

out_range valid_outputs(int offset, int stride, int size, int outputs) {
  // o * stride + offset >= 0  <=>  o >= ceil(-offset / stride)
  int lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  // o * stride + offset <= size - 1  <=>  o <= floor((size-1-offset)/stride)
  int last = size - 1 - offset;
  int hi = last < 0 ? 0 : last / stride + 1;
  lo = std::min(lo, outputs);
  hi = std::clamp(hi, lo, outputs);
  return {lo, hi};
}

/// col [c*r*s, oh*ow] from one image x [c, h, w]: row (ci, kr, ks) holds
/// the input each output position sees through that filter tap (0 in the
/// padding).
void im2col(const conv2d_shape& s, const float* x, float* col) {
  int oh = s.out_h(), ow = s.out_w();
  for (int ci = 0; ci < s.c; ++ci)
    for (int kr = 0; kr < s.r; ++kr)
      for (int ks = 0; ks < s.s; ++ks) {
        float* dst = col
                     + ((static_cast<size_t>(ci) * s.r + kr) * s.s + ks)
                         * static_cast<size_t>(oh) * ow;
        auto xs = valid_outputs(ks - s.pad, s.stride, s.w, ow);
        for (int oy = 0; oy < oh; ++oy) {
          float* row = dst + static_cast<size_t>(oy) * ow;
          int iy = oy * s.stride - s.pad + kr;
          if (iy < 0 || iy >= s.h) {
            std::fill_n(row, ow, 0.0f);
            continue;
          }
          const float* src =
            x + (static_cast<size_t>(ci) * s.h + iy) * s.w + ks - s.pad;
          std::fill(row, row + xs.lo, 0.0f);
          if (s.stride == 1)
            std::copy(src + xs.lo, src + xs.hi, row + xs.lo);
          else
            for (int ox = xs.lo; ox < xs.hi; ++ox)
              row[ox] = src[ox * s.stride];
          std::fill(row + xs.hi, row + ow, 0.0f);
        }
      }
}

/// The adjoint of im2col: dx [c, h, w] += each tap's column.
void col2im(const conv2d_shape& s, const float* col, float* dx) {
  int oh = s.out_h(), ow = s.out_w();
  for (int ci = 0; ci < s.c; ++ci)
    for (int kr = 0; kr < s.r; ++kr)
      for (int ks = 0; ks < s.s; ++ks) {
        const float* src = col
                           + ((static_cast<size_t>(ci) * s.r + kr) * s.s + ks)
                               * static_cast<size_t>(oh) * ow;
        auto xs = valid_outputs(ks - s.pad, s.stride, s.w, ow);
        for (int oy = 0; oy < oh; ++oy) {
          int iy = oy * s.stride - s.pad + kr;
          if (iy < 0 || iy >= s.h)
            continue;
          const float* row = src + static_cast<size_t>(oy) * ow;
          float* dst =
            dx + (static_cast<size_t>(ci) * s.h + iy) * s.w + ks - s.pad;
          for (int ox = xs.lo; ox < xs.hi; ++ox)
            dst[ox * s.stride] += row[ox];
        }
      }
}

/// A 1x1 filter with stride 1 and no padding sees the image itself.
bool is_pointwise(const conv2d_shape& s) noexcept {
  return s.r == 1 && s.s == 1 && s.stride == 1 && s.pad == 0;
}

// Separate arrays: stated, so the loop vectorises (the backward pass of
// every ReLU runs it over the whole activation).
void relu_mask(const float* __restrict__ y, const float* __restrict__ dy,
               float* __restrict__ dx, size_t n) {
  for (size_t i = 0; i < n; ++i)
    dx[i] = y[i] > 0 ? dy[i] : 0.0f;
}

class cpu_device final : public device {
public:
  cpu_device() {
    static std::once_flag once;
    std::call_once(once, [] { openblas_set_num_threads(1); });
  }

  std::string name() const override { return "cpu"; }
  bool is_cuda() const noexcept override { return false; }

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
    copy(dst, src, bytes);
  }
  void upload_async(void* dst, const void* src, size_t bytes) override {
    copy(dst, src, bytes);
  }
  void wait_uploads() override {}
  void download(void* dst, const void* src, size_t bytes) override {
    copy(dst, src, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0 && dst != src)
      std::memmove(dst, src, bytes);
  }
  void fill(float* x, size_t n, float value) override {
    std::fill_n(x, n, value);
  }
  void sync() override {}

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

  // --- layers ---------------------------------------------------------

  void relu_forward(const float* x, float* y, size_t n) override {
    for (size_t i = 0; i < n; ++i)
      y[i] = x[i] > 0 ? x[i] : 0.0f;
  }

  void relu_backward(const float* y, const float* dy, float* dx,
                     size_t n) override {
    relu_mask(y, dy, dx, n);
  }

  void conv2d_forward(const conv2d_shape& s, const float* x, const float* w,
                      const float* b, float* y) override {
    size_t in = image_size(s), out = out_size(s);
    int taps = s.c * s.r * s.s, positions = s.out_h() * s.out_w();
    float* col = is_pointwise(s) ? nullptr : workspace(col_, s);
    for (int i = 0; i < s.n; ++i) {
      const float* xi = x + i * in;
      float* yi = y + i * out;
      if (col != nullptr)
        im2col(s, xi, col);
      // y_i [k, positions] = w [k, taps] col [taps, positions]
      gemm(false, false, s.k, positions, taps, 1.0f, w,
           col != nullptr ? col : xi, 0.0f, yi);
      if (b != nullptr)
        for (int f = 0; f < s.k; ++f) {
          float* plane = yi + static_cast<size_t>(f) * positions;
          for (int j = 0; j < positions; ++j)
            plane[j] += b[f];
        }
    }
  }

  void conv2d_backward(const conv2d_shape& s, const float* x, const float* w,
                       const float* dy, float* dx, float* dw,
                       float* db) override {
    size_t in = image_size(s), out = out_size(s);
    int taps = s.c * s.r * s.s, positions = s.out_h() * s.out_w();
    bool pointwise = is_pointwise(s);
    float* col = pointwise ? nullptr : workspace(col_, s);
    float* dcol = pointwise || dx == nullptr ? nullptr : workspace(dcol_, s);
    std::fill_n(dw, static_cast<size_t>(s.k) * taps, 0.0f);
    if (db != nullptr)
      std::fill_n(db, s.k, 0.0f);
    for (int i = 0; i < s.n; ++i) {
      const float* xi = x + i * in;
      const float* dyi = dy + i * out;
      if (col != nullptr)
        im2col(s, xi, col);
      // dw [k, taps] += dy_i [k, positions] col^T [positions, taps]
      gemm(false, true, s.k, taps, positions, 1.0f, dyi,
           col != nullptr ? col : xi, 1.0f, dw);
      if (db != nullptr)
        for (int f = 0; f < s.k; ++f) {
          const float* plane = dyi + static_cast<size_t>(f) * positions;
          float sum = 0;
          for (int j = 0; j < positions; ++j)
            sum += plane[j];
          db[f] += sum;
        }
      if (dx != nullptr) {
        // dcol [taps, positions] = w^T [taps, k] dy_i [k, positions]
        float* dxi = dx + i * in;
        if (pointwise) {
          gemm(true, false, taps, positions, s.k, 1.0f, w, dyi, 0.0f, dxi);
        } else {
          gemm(true, false, taps, positions, s.k, 1.0f, w, dyi, 0.0f, dcol);
          std::fill_n(dxi, in, 0.0f);
          col2im(s, dcol, dxi);
        }
      }
    }
  }

  void maxpool_forward(const pool_shape& s, const float* x, float* y) override {
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
  static size_t image_size(const conv2d_shape& s) noexcept {
    return static_cast<size_t>(s.c) * s.h * s.w;
  }
  static size_t out_size(const conv2d_shape& s) noexcept {
    return static_cast<size_t>(s.k) * s.out_h() * s.out_w();
  }
  /// One image's im2col matrix, kept across calls so steps do not
  /// allocate.
  static float* workspace(std::vector<float>& buf, const conv2d_shape& s) {
    size_t need = static_cast<size_t>(s.c) * s.r * s.s * s.out_h() * s.out_w();
    if (buf.size() < need)
      buf.resize(need);
    return buf.data();
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

  std::vector<float> col_, dcol_;
};

} // namespace

std::unique_ptr<device> make_cpu_device() {
  return std::make_unique<cpu_device>();
}

} // namespace af::gpu
