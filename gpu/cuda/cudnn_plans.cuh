// cuDNN's descriptors, owned, and the plans the CUDA device caches per
// shape (gpu/cuda/cuda_device.cu): for a convolution its descriptors, the
// algorithms picked for forward and both backward passes, their workspace
// sizes and math types; for max pooling its descriptors.
#pragma once

#include <cudnn.h>

#include <cstddef>

#include "actorflow/gpu/cuda/check.cuh"
#include "actorflow/gpu/device.hpp"

namespace af::gpu::cuda {

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
  conv_plan(cudnnHandle_t h, const conv2d_shape& s, bool tensor_ops);
};

struct pool_plan {
  tensor_desc x, y;
  pool_desc pool;
  explicit pool_plan(const pool_shape& s)
    : x(s.n, s.c, s.h, s.w), y(s.n, s.c, s.out_h(), s.out_w()),
      pool(s.window, s.stride) {}
};

} // namespace af::gpu::cuda
