// image_decode on a GPU (gpu/jpeg_decoder.hpp): nvJPEG decodes a batch at
// full size into one scratch block (interleaved RGB, or luma for one
// channel), then one kernel crops, resizes, flips and normalizes every
// image of the batch with the sampling maps the caller computed.
//
// Memory: each batch's output comes from the decoder's own stream-ordered
// pool (cudaMallocFromPoolAsync; it keeps what is freed, for the next
// batches, without touching the device's default pool) and goes back to
// it (cudaFreeAsync) on the decoder's stream when the last tensor holding
// it is gone, so that freeing never waits for the whole GPU as cudaFree
// does. A consumer on another stream
// must have finished reading it by then: the trainer keeps a batch until
// the step that read it has downloaded its gradients.
#include <nvjpeg.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "actorflow/gpu/cuda/check.cuh"
#include "actorflow/gpu/device.hpp"
#include "actorflow/gpu/jpeg_decoder.hpp"

namespace af::gpu {
namespace {

const char* nvjpeg_status(nvjpegStatus_t s) {
  switch (s) {
    case NVJPEG_STATUS_SUCCESS:
      return "success";
    case NVJPEG_STATUS_NOT_INITIALIZED:
      return "not initialized";
    case NVJPEG_STATUS_INVALID_PARAMETER:
      return "invalid parameter";
    case NVJPEG_STATUS_BAD_JPEG:
      return "bad JPEG";
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED:
      return "JPEG not supported";
    case NVJPEG_STATUS_ALLOCATOR_FAILURE:
      return "allocator failure";
    case NVJPEG_STATUS_EXECUTION_FAILED:
      return "execution failed";
    case NVJPEG_STATUS_ARCH_MISMATCH:
      return "architecture mismatch";
    case NVJPEG_STATUS_INTERNAL_ERROR:
      return "internal error";
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED:
      return "implementation not supported";
    default:
      return "unknown nvJPEG status";
  }
}

void check_nvjpeg(nvjpegStatus_t s, const char* call) {
  if (s != NVJPEG_STATUS_SUCCESS)
    cuda::fail(call, nvjpeg_status(s));
}

#define AF_NVJPEG_CHECK(call) check_nvjpeg((call), #call)

// Where image i of a batch starts in the scratch block (SIZE_MAX: not
// decoded on the GPU) and its row pitch in bytes.
struct source {
  size_t offset;
  int pitch;
};

// One thread per output pixel of one image (blockIdx.z). The float
// operations are resample() of runtime/image/image_ops.cpp, one by one, with the
// _rn intrinsics so that nvcc fuses none of them into an FMA (the CPU
// build has none either: x86-64 without -mfma).
template <class Out>
__global__ void resample_kernel(const uint8_t* scratch, const source* src,
                                const int* maps, const float* fracs,
                                int out_w, int out_h, int c, float s0,
                                float s1, float s2, float h0, float h1,
                                float h2, Out* dst) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  int i = blockIdx.z;
  if (x >= out_w || y >= out_h || src[i].offset == SIZE_MAX)
    return;
  const int* xl = maps + static_cast<size_t>(i) * 2 * (out_w + out_h);
  const int* xh = xl + out_w;
  const int* yl = xh + out_w;
  const int* yh = yl + out_h;
  const float* xf = fracs + static_cast<size_t>(i) * (out_w + out_h);
  const float* yf = xf + out_w;
  const uint8_t* base = scratch + src[i].offset;
  const uint8_t* r0 = base + static_cast<size_t>(yl[y]) * src[i].pitch;
  const uint8_t* r1 = base + static_cast<size_t>(yh[y]) * src[i].pitch;
  int x0 = xl[x] * c, x1 = xh[x] * c;
  float fx = xf[x], fy = yf[y];
  Out* out = dst + (static_cast<size_t>(i) * out_h * out_w
                    + static_cast<size_t>(y) * out_w + x)
                     * c;
  for (int k = 0; k < c; ++k) {
    float top = __fadd_rn(
      static_cast<float>(r0[x0 + k]),
      __fmul_rn(static_cast<float>(r0[x1 + k] - r0[x0 + k]), fx));
    float bottom = __fadd_rn(
      static_cast<float>(r1[x0 + k]),
      __fmul_rn(static_cast<float>(r1[x1 + k] - r1[x0 + k]), fx));
    float v = __fadd_rn(top, __fmul_rn(__fsub_rn(bottom, top), fy));
    if constexpr (sizeof(Out) == 1) {
      out[k] = static_cast<uint8_t>(fminf(fmaxf(__fadd_rn(v, 0.5f), 0.0f),
                                          255.0f));
    } else {
      float scale = k == 0 ? s0 : (k == 1 ? s1 : s2);
      float shift = k == 0 ? h0 : (k == 1 ? h1 : h2);
      out[k] = __fadd_rn(__fmul_rn(v, scale), shift);
    }
  }
}

// A batch's output: stream-ordered device memory.
class batch_memory final : public device_memory {
public:
  batch_memory(int ordinal, void* ptr, std::shared_ptr<CUstream_st> stream)
    : ordinal_(ordinal), ptr_(ptr), stream_(std::move(stream)) {}
  ~batch_memory() override {
    cudaSetDevice(ordinal_);
    cudaFreeAsync(ptr_, stream_.get());
  }
  int ordinal() const noexcept override { return ordinal_; }
  const void* pointer() const noexcept override { return ptr_; }
  void copy_to_host(std::byte* dst, size_t bytes) const override {
    AF_CUDA_CHECK(cudaSetDevice(ordinal_));
    AF_CUDA_CHECK(cudaMemcpy(dst, ptr_, bytes, cudaMemcpyDeviceToHost));
  }

private:
  int ordinal_;
  void* ptr_;
  std::shared_ptr<CUstream_st> stream_; // lives while any output does
};

class nvjpeg_decoder final : public jpeg_decoder {
public:
  explicit nvjpeg_decoder(int ordinal) : ordinal_(ordinal) {
    bind();
    cudaDeviceProp prop{};
    AF_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal_));
    int major = 0, minor = 0;
    nvjpegGetProperty(MAJOR_VERSION, &major);
    nvjpegGetProperty(MINOR_VERSION, &minor);
    name_ = "nvJPEG " + std::to_string(major) + "." + std::to_string(minor)
            + " on cuda:" + std::to_string(ordinal_) + " (" + prop.name
            + ")";
    cudaStream_t s = nullptr;
    AF_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int ord = ordinal_;
    stream_.reset(s, [ord](cudaStream_t st) {
      cudaSetDevice(ord);
      cudaStreamSynchronize(st);
      cudaStreamDestroy(st);
    });
    try {
      // Freed batches stay in this pool for the next ones.
      cudaMemPoolProps props{};
      props.allocType = cudaMemAllocationTypePinned;
      props.location.type = cudaMemLocationTypeDevice;
      props.location.id = ordinal_;
      AF_CUDA_CHECK(cudaMemPoolCreate(&pool_, &props));
      uint64_t keep = UINT64_MAX;
      AF_CUDA_CHECK(cudaMemPoolSetAttribute(
        pool_, cudaMemPoolAttrReleaseThreshold, &keep));
      AF_NVJPEG_CHECK(nvjpegCreateSimple(&handle_));
      AF_NVJPEG_CHECK(nvjpegJpegStateCreate(handle_, &state_));
      AF_NVJPEG_CHECK(nvjpegJpegStateCreate(handle_, &single_));
    } catch (...) {
      release();
      throw;
    }
  }

  ~nvjpeg_decoder() override { release(); }

  std::string name() const override { return name_; }
  int ordinal() const noexcept override { return ordinal_; }

  std::shared_ptr<device_memory> decode(const std::vector<jpeg_job>& jobs,
                                        const jpeg_output& out,
                                        std::vector<size_t>& failed) override {
    bind();
    failed.clear();
    auto n = jobs.size();
    auto fmt = out.channels == 1 ? NVJPEG_OUTPUT_Y : NVJPEG_OUTPUT_RGBI;
    // Sizes from nvJPEG's own reading of each header, and scratch offsets.
    std::vector<source> src(n, source{SIZE_MAX, 0});
    std::vector<size_t> on_gpu;
    size_t scratch_bytes = 0;
    for (size_t i = 0; i < n; ++i) {
      int comps = 0;
      nvjpegChromaSubsampling_t sub{};
      int w[NVJPEG_MAX_COMPONENT] = {}, h[NVJPEG_MAX_COMPONENT] = {};
      auto& d = jobs[i].data;
      if (d.empty()
          || nvjpegGetImageInfo(handle_,
                                reinterpret_cast<const unsigned char*>(
                                  d.data()),
                                d.size(), &comps, &sub, w, h)
               != NVJPEG_STATUS_SUCCESS
          || (comps != 1 && comps != 3) || w[0] != jobs[i].width
          || h[0] != jobs[i].height) {
        failed.push_back(i);
        continue;
      }
      src[i] = source{scratch_bytes, w[0] * out.channels};
      // Every image starts 256-byte aligned, as cudaMalloc's blocks do.
      scratch_bytes += (static_cast<size_t>(w[0]) * h[0] * out.channels
                        + 255) / 256 * 256;
      on_gpu.push_back(i);
    }
    // Not enough GPU memory for the batch at full size: the caller decodes
    // it on the CPU.
    if (!on_gpu.empty() && !reserve(scratch_, scratch_capacity_, scratch_bytes)) {
      failed.insert(failed.end(), on_gpu.begin(), on_gpu.end());
      on_gpu.clear();
    }
    decode_all(jobs, src, on_gpu, fmt, failed);
    std::sort(failed.begin(), failed.end());
    for (auto i : failed)
      src[i].offset = SIZE_MAX;
    // Maps and sources in one upload.
    size_t ow = static_cast<size_t>(out.width);
    size_t oh = static_cast<size_t>(out.height);
    size_t ints = n * 2 * (ow + oh), floats = n * (ow + oh);
    size_t src_bytes = n * sizeof(source);
    size_t map_at = src_bytes;
    size_t frac_at = map_at + ints * sizeof(int);
    size_t total = frac_at + floats * sizeof(float);
    // (Every call ends with the stream idle: staging is free.)
    if (staging_capacity_ < total) {
      cudaFreeHost(staging_);
      staging_ = nullptr;
      staging_capacity_ = 0;
      AF_CUDA_CHECK(cudaMallocHost(&staging_, total));
      staging_capacity_ = total;
    }
    auto* st = static_cast<char*>(staging_);
    std::memcpy(st, src.data(), src_bytes);
    auto* m = reinterpret_cast<int*>(st + map_at);
    auto* f = reinterpret_cast<float*>(st + frac_at);
    for (size_t i = 0; i < n; ++i) {
      auto& j = jobs[i];
      auto* mi = m + i * 2 * (ow + oh);
      auto* fi = f + i * (ow + oh);
      if (src[i].offset == SIZE_MAX)
        continue; // not read by the kernel
      std::memcpy(mi, j.x_lo, ow * sizeof(int));
      std::memcpy(mi + ow, j.x_hi, ow * sizeof(int));
      std::memcpy(mi + 2 * ow, j.y_lo, oh * sizeof(int));
      std::memcpy(mi + 2 * ow + oh, j.y_hi, oh * sizeof(int));
      std::memcpy(fi, j.x_frac, ow * sizeof(float));
      std::memcpy(fi + ow, j.y_frac, oh * sizeof(float));
    }
    if (!reserve(params_, params_capacity_, total))
      AF_CUDA_CHECK(cudaErrorMemoryAllocation);
    AF_CUDA_CHECK(cudaMemcpyAsync(params_, staging_, total,
                                  cudaMemcpyHostToDevice, stream_.get()));
    void* dst = nullptr;
    AF_CUDA_CHECK(cudaMallocFromPoolAsync(
      &dst, std::max<size_t>(n * out.image_bytes(), 1), pool_, stream_.get()));
    auto result =
      std::make_shared<batch_memory>(ordinal_, dst, stream_);
    if (n > 0 && on_gpu.size() > failed_among(on_gpu, failed)) {
      // At most 65535 images per launch (the grid's z limit).
      for (size_t first = 0; first < n; first += 65535) {
        auto count = std::min<size_t>(n - first, 65535);
        dim3 block(32, 8);
        dim3 grid((out.width + 31) / 32, (out.height + 7) / 8,
                  static_cast<unsigned>(count));
        auto* p = static_cast<const char*>(params_);
        auto* s = reinterpret_cast<const source*>(p) + first;
        auto* mp = reinterpret_cast<const int*>(p + map_at)
                   + first * 2 * (ow + oh);
        auto* fp = reinterpret_cast<const float*>(p + frac_at)
                   + first * (ow + oh);
        auto* sc = static_cast<const uint8_t*>(scratch_);
        auto at = first * out.image_bytes();
        if (out.as_u8)
          resample_kernel<uint8_t><<<grid, block, 0, stream_.get()>>>(
            sc, s, mp, fp, out.width, out.height, out.channels, 0, 0, 0, 0,
            0, 0, reinterpret_cast<uint8_t*>(static_cast<char*>(dst) + at));
        else
          resample_kernel<float><<<grid, block, 0, stream_.get()>>>(
            sc, s, mp, fp, out.width, out.height, out.channels, out.scale[0],
            out.scale[1], out.scale[2], out.shift[0], out.shift[1],
            out.shift[2],
            reinterpret_cast<float*>(static_cast<char*>(dst) + at));
        cuda::check_launch("resample_kernel");
      }
    }
    // Complete before anyone reads it (the contract of device_memory).
    AF_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
    return result;
  }

  void write(const device_memory& mem, size_t offset, const void* host,
             size_t bytes) override {
    bind();
    auto* dst = static_cast<char*>(const_cast<void*>(mem.pointer())) + offset;
    AF_CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice,
                                  stream_.get()));
    AF_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  }

private:
  void bind() { AF_CUDA_CHECK(cudaSetDevice(ordinal_)); }

  void release() noexcept {
    cudaSetDevice(ordinal_);
    cudaStreamSynchronize(stream_.get());
    cudaFree(scratch_);
    cudaFree(params_);
    cudaFreeHost(staging_);
    if (single_ != nullptr)
      nvjpegJpegStateDestroy(single_);
    if (state_ != nullptr)
      nvjpegJpegStateDestroy(state_);
    if (handle_ != nullptr)
      nvjpegDestroy(handle_);
    // (Outputs still out hold the stream; the pool goes when they do not
    // need it: cudaMemPoolDestroy defers while allocations are live.)
    if (pool_ != nullptr)
      cudaMemPoolDestroy(pool_);
    scratch_ = params_ = staging_ = nullptr;
    single_ = state_ = nullptr;
    handle_ = nullptr;
    pool_ = nullptr;
  }

  static size_t failed_among(const std::vector<size_t>& on_gpu,
                             const std::vector<size_t>& failed) {
    size_t k = 0;
    for (auto i : on_gpu)
      k += std::binary_search(failed.begin(), failed.end(), i) ? 1 : 0;
    return k;
  }

  // False when the GPU has not that much memory free (p is then empty).
  bool reserve(void*& p, size_t& capacity, size_t bytes) {
    if (capacity >= bytes && p != nullptr)
      return true;
    AF_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
    cudaFree(p);
    p = nullptr;
    capacity = 0;
    bytes = std::max<size_t>(bytes + bytes / 4, 1); // room to grow
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      cudaGetLastError(); // not sticky
      p = nullptr;
      return false;
    }
    capacity = bytes;
    return true;
  }

  // The images in `on_gpu` into the scratch block: one batched call; when
  // it fails (one bad stream fails the batch), one call per image, so that
  // only the bad ones are listed in `failed`.
  void decode_all(const std::vector<jpeg_job>& jobs,
                  const std::vector<source>& src,
                  const std::vector<size_t>& on_gpu, nvjpegOutputFormat_t fmt,
                  std::vector<size_t>& failed) {
    if (on_gpu.empty())
      return;
    std::vector<const unsigned char*> data;
    std::vector<size_t> lengths;
    std::vector<nvjpegImage_t> dest;
    for (auto i : on_gpu) {
      data.push_back(
        reinterpret_cast<const unsigned char*>(jobs[i].data.data()));
      lengths.push_back(jobs[i].data.size());
      nvjpegImage_t img{};
      img.channel[0] = static_cast<unsigned char*>(scratch_) + src[i].offset;
      img.pitch[0] = static_cast<size_t>(src[i].pitch);
      dest.push_back(img);
    }
    auto batch = static_cast<int>(on_gpu.size());
    bool ok = false;
    if (nvjpegDecodeBatchedInitialize(handle_, state_, batch, 1, fmt)
        == NVJPEG_STATUS_SUCCESS) {
      ok = nvjpegDecodeBatched(handle_, state_, data.data(), lengths.data(),
                               dest.data(), stream_.get())
           == NVJPEG_STATUS_SUCCESS;
      ok = ok && cudaStreamSynchronize(stream_.get()) == cudaSuccess;
    }
    if (ok)
      return;
    // Whatever the failed call queued finishes before anything else uses
    // the scratch block; the batched state is reset by the next batch's
    // nvjpegDecodeBatchedInitialize, and single images use their own.
    cudaStreamSynchronize(stream_.get());
    cudaGetLastError(); // a failed decode may leave a (non-sticky) error
    for (size_t k = 0; k < on_gpu.size(); ++k) {
      bool one = nvjpegDecode(handle_, single_, data[k], lengths[k], fmt,
                              &dest[k], stream_.get())
                   == NVJPEG_STATUS_SUCCESS
                 && cudaStreamSynchronize(stream_.get()) == cudaSuccess;
      if (!one) {
        cudaGetLastError();
        failed.push_back(on_gpu[k]);
      }
    }
  }

  int ordinal_;
  std::string name_;
  std::shared_ptr<CUstream_st> stream_;
  nvjpegHandle_t handle_ = nullptr;
  nvjpegJpegState_t state_ = nullptr;  // batched decodes
  nvjpegJpegState_t single_ = nullptr; // one image at a time, after a failure
  cudaMemPool_t pool_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_capacity_ = 0;
  void* params_ = nullptr;
  size_t params_capacity_ = 0;
  void* staging_ = nullptr;
  size_t staging_capacity_ = 0;
};

} // namespace

bool nvjpeg_available(std::string* why) {
  if (!cuda_available(why))
    return false;
  int major = 0;
  if (nvjpegGetProperty(MAJOR_VERSION, &major) != NVJPEG_STATUS_SUCCESS) {
    if (why != nullptr)
      *why = "libnvjpeg does not answer";
    return false;
  }
  return true;
}

std::unique_ptr<jpeg_decoder> make_nvjpeg_decoder(int ordinal) {
  std::string why;
  if (!nvjpeg_available(&why))
    throw std::runtime_error("no nvJPEG decoder: " + why);
  return std::make_unique<nvjpeg_decoder>(ordinal);
}

} // namespace af::gpu
