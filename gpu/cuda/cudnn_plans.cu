// The CUDA device's convolution plans (gpu/cuda/cudnn_plans.cuh): which
// of cuDNN's algorithms each pass runs, for the device's precision.
#include "actorflow/gpu/cuda/cudnn_plans.cuh"

#include <stdexcept>

namespace af::gpu::cuda {

namespace {

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

} // namespace

conv_plan::conv_plan(cudnnHandle_t h, const conv2d_shape& s, bool tensor_ops)
  : x(s.n, s.c, s.h, s.w), y(s.n, s.k, s.out_h(), s.out_w()),
    bias(1, s.k, 1, 1), w(s.k, s.c, s.r, s.s),
    conv(s.pad, s.stride, tensor_ops ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH),
    base_math(tensor_ops ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH),
    fwd_math(base_math), bwd_data_math(base_math), bwd_filter_math(base_math) {
  int n = 0, k = 0, oh = 0, ow = 0;
  AF_CUDA_CHECK(
    cudnnGetConvolution2dForwardOutputDim(conv.d, x.d, w.d, &n, &k, &oh, &ow));
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

} // namespace af::gpu::cuda
