// Loops of the CPU device (gpu/cpu_device.cpp) that are long enough to
// stand alone: im2col / col2im for convolution as GEMM, and 2x2 max
// pooling without branches.
#include "actorflow/gpu/cpu_loops.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>

namespace af::gpu::cpu {

namespace {

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

} // namespace

/// col [c*r*s, oh*ow] from one image x [c, h, w]: row (ci, kr, ks) holds
/// the input each output position sees through that filter tap (0 in the
/// padding). Rows of col are `ld` floats apart (ld >= oh*ow), so the
/// images of a chunk sit side by side: image b's block starts at column
/// b*oh*ow.
void im2col(const conv2d_shape& s, const float* __restrict__ x,
            float* __restrict__ col, size_t ld) {
  int oh = s.out_h(), ow = s.out_w();
  for (int ci = 0; ci < s.c; ++ci)
    for (int kr = 0; kr < s.r; ++kr)
      for (int ks = 0; ks < s.s; ++ks) {
        float* dst =
          col + ((static_cast<size_t>(ci) * s.r + kr) * s.s + ks) * ld;
        auto xs = valid_outputs(ks - s.pad, s.stride, s.w, ow);
        for (int oy = 0; oy < oh; ++oy) {
          float* __restrict__ row = dst + static_cast<size_t>(oy) * ow;
          int iy = oy * s.stride - s.pad + kr;
          if (iy < 0 || iy >= s.h) {
            for (int ox = 0; ox < ow; ++ox)
              row[ox] = 0.0f;
            continue;
          }
          // src[ox * stride + ks - pad] for ox in [xs.lo, xs.hi)
          const float* __restrict__ src =
            x + (static_cast<size_t>(ci) * s.h + iy) * s.w;
          int shift = ks - s.pad;
          for (int ox = 0; ox < xs.lo; ++ox)
            row[ox] = 0.0f;
          if (s.stride == 1)
            for (int ox = xs.lo; ox < xs.hi; ++ox)
              row[ox] = src[ox + shift];
          else
            for (int ox = xs.lo; ox < xs.hi; ++ox)
              row[ox] = src[ox * s.stride + shift];
          for (int ox = xs.hi; ox < ow; ++ox)
            row[ox] = 0.0f;
        }
      }
}

/// The adjoint of im2col: dx [c, h, w] += each tap's column (rows of col
/// `ld` floats apart, as in im2col).
void col2im(const conv2d_shape& s, const float* __restrict__ col, size_t ld,
            float* __restrict__ dx) {
  int oh = s.out_h(), ow = s.out_w();
  for (int ci = 0; ci < s.c; ++ci)
    for (int kr = 0; kr < s.r; ++kr)
      for (int ks = 0; ks < s.s; ++ks) {
        const float* src =
          col + ((static_cast<size_t>(ci) * s.r + kr) * s.s + ks) * ld;
        auto xs = valid_outputs(ks - s.pad, s.stride, s.w, ow);
        int shift = ks - s.pad;
        for (int oy = 0; oy < oh; ++oy) {
          int iy = oy * s.stride - s.pad + kr;
          if (iy < 0 || iy >= s.h)
            continue;
          const float* __restrict__ row = src + static_cast<size_t>(oy) * ow;
          float* __restrict__ dst =
            dx + (static_cast<size_t>(ci) * s.h + iy) * s.w;
          if (s.stride == 1)
            for (int ox = xs.lo; ox < xs.hi; ++ox)
              dst[ox + shift] += row[ox];
          else
            for (int ox = xs.lo; ox < xs.hi; ++ox)
              dst[ox * s.stride + shift] += row[ox];
        }
      }
}

/// Max pooling with a 2x2 window and stride 2 (the common case), without
/// branches; ties go to the first maximum in the order (0,0), (0,1),
/// (1,0), (1,1), as the CPU device's general max pooling. dx: windows
/// write all 4 of their inputs; inputs no window covers (an odd last row
/// or column) get 0.
void maxpool2x2_forward(const pool_shape& s, const float* __restrict__ x,
                        float* __restrict__ y) {
  int oh = s.out_h(), ow = s.out_w();
  size_t planes = static_cast<size_t>(s.n) * s.c;
  for (size_t p = 0; p < planes; ++p) {
    const float* xp = x + p * s.h * s.w;
    float* yp = y + p * oh * ow;
    for (int oy = 0; oy < oh; ++oy) {
      const float* __restrict__ r0 = xp + static_cast<size_t>(2 * oy) * s.w;
      const float* __restrict__ r1 = r0 + s.w;
      float* __restrict__ out = yp + static_cast<size_t>(oy) * ow;
      for (int ox = 0; ox < ow; ++ox) {
        float m = r0[2 * ox];
        float v = r0[2 * ox + 1];
        m = v > m ? v : m;
        v = r1[2 * ox];
        m = v > m ? v : m;
        v = r1[2 * ox + 1];
        m = v > m ? v : m;
        out[ox] = m;
      }
    }
  }
}

void maxpool2x2_backward(const pool_shape& s, const float* __restrict__ x,
                         const float* __restrict__ dy, float* __restrict__ dx) {
  int oh = s.out_h(), ow = s.out_w();
  size_t planes = static_cast<size_t>(s.n) * s.c;
  for (size_t p = 0; p < planes; ++p) {
    const float* xp = x + p * s.h * s.w;
    float* dxp = dx + p * s.h * s.w;
    const float* dyp = dy + p * oh * ow;
    for (int oy = 0; oy < oh; ++oy) {
      size_t at = static_cast<size_t>(2 * oy) * s.w;
      const float* __restrict__ r0 = xp + at;
      const float* __restrict__ r1 = r0 + s.w;
      float* __restrict__ d0 = dxp + at;
      float* __restrict__ d1 = d0 + s.w;
      const float* __restrict__ g = dyp + static_cast<size_t>(oy) * ow;
      for (int ox = 0; ox < ow; ++ox) {
        float a = r0[2 * ox], b = r0[2 * ox + 1], c = r1[2 * ox],
              d = r1[2 * ox + 1];
        bool tb = b > a;
        float m = tb ? b : a;
        bool tc = c > m;
        m = tc ? c : m;
        bool td = d > m;
        // The winner's input gets dy, the others +0: bit masks, as
        // conditional stores would compile to unpredictable branches.
        uint32_t gv = std::bit_cast<uint32_t>(g[ox]);
        uint32_t mb = 0u - tb, mc = 0u - tc, md = 0u - td;
        d0[2 * ox] = std::bit_cast<float>(gv & ~(mb | mc | md));
        d0[2 * ox + 1] = std::bit_cast<float>(gv & mb & ~(mc | md));
        d1[2 * ox] = std::bit_cast<float>(gv & mc & ~md);
        d1[2 * ox + 1] = std::bit_cast<float>(gv & md);
      }
      for (int ix = 2 * ow; ix < s.w; ++ix)
        d0[ix] = d1[ix] = 0.0f;
    }
    std::fill(dxp + static_cast<size_t>(2 * oh) * s.w,
              dxp + static_cast<size_t>(s.h) * s.w, 0.0f);
  }
}

} // namespace af::gpu::cpu
