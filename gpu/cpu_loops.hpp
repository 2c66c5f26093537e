// Loops of the CPU device (gpu/cpu_device.cpp) that stand alone: im2col /
// col2im for convolution as GEMM, and 2x2 max pooling without branches.
#pragma once

#include <cstddef>

#include "actorflow/gpu/device.hpp"

namespace af::gpu::cpu {

/// col [c*r*s, oh*ow] from one image x [c, h, w]: row (ci, kr, ks) holds
/// the input each output position sees through that filter tap (0 in the
/// padding). Rows of col are `ld` floats apart (ld >= oh*ow), so the
/// images of a chunk sit side by side: image b's block starts at column
/// b*oh*ow.
void im2col(const conv2d_shape& s, const float* __restrict__ x,
            float* __restrict__ col, size_t ld);

/// The adjoint of im2col: dx [c, h, w] += each tap's column (rows of col
/// `ld` floats apart, as in im2col).
void col2im(const conv2d_shape& s, const float* __restrict__ col, size_t ld,
            float* __restrict__ dx);

/// Max pooling with a 2x2 window and stride 2, x [n, c, h, w] ->
/// y [n, c, h/2, w/2]; ties go to the first maximum in the order (0,0),
/// (0,1), (1,0), (1,1).
void maxpool2x2_forward(const pool_shape& s, const float* __restrict__ x,
                        float* __restrict__ y);

/// Its gradient: each window's winner gets dy, the rest of dx 0 (inputs
/// no window covers too).
void maxpool2x2_backward(const pool_shape& s, const float* __restrict__ x,
                         const float* __restrict__ dy, float* __restrict__ dx);

} // namespace af::gpu::cpu
