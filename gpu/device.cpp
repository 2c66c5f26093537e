// What every device shares: darray, and choosing a device by name.
#include "actorflow/gpu/device.hpp"

#include <charconv>
#include <stdexcept>
#include <string_view>
#include <utility>

namespace af::gpu {

device::~device() = default;

// --- darray ----------------------------------------------------------

darray::darray(device& dev, size_t bytes) : dev_(&dev) {
  reserve(dev, bytes);
}

darray::darray(darray&& other) noexcept
  : dev_(std::exchange(other.dev_, nullptr)),
    ptr_(std::exchange(other.ptr_, nullptr)),
    bytes_(std::exchange(other.bytes_, 0)) {
}

darray& darray::operator=(darray&& other) noexcept {
  if (this != &other) {
    if (ptr_ != nullptr)
      dev_->deallocate(ptr_);
    dev_ = std::exchange(other.dev_, nullptr);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

darray::~darray() {
  if (ptr_ != nullptr)
    dev_->deallocate(ptr_);
}

void darray::reserve(device& dev, size_t bytes) {
  if (ptr_ != nullptr && dev_ == &dev && bytes <= bytes_)
    return;
  if (ptr_ == nullptr && bytes == 0) {
    dev_ = &dev;
    return;
  }
  // Free first: the old contents need not survive, and the peak stays at
  // the new size.
  if (ptr_ != nullptr) {
    dev_->deallocate(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  dev_ = &dev;
  ptr_ = dev.allocate(bytes);
  bytes_ = bytes;
}

// --- precision -------------------------------------------------------

bool parse_precision(std::string_view name, precision& out) noexcept {
  for (auto p : {precision::fp32, precision::tf32, precision::bf16})
    if (name == precision_name(p)) {
      out = p;
      return true;
    }
  return false;
}

const char* precision_name(precision p) noexcept {
  switch (p) {
    case precision::tf32:
      return "tf32";
    case precision::bf16:
      return "bf16";
    case precision::fp32:
      break;
  }
  return "fp32";
}

// --- choosing a device -----------------------------------------------

#ifndef AF_HAVE_CUDA
// Built with the CUDA device, gpu/cuda/cuda_device.cu provides these.
namespace {
constexpr const char* no_cuda_reason =
  "this build has no CUDA device (the CUDA toolkit or cuDNN was not found, "
  "or AF_CUDA=OFF)";
} // namespace

bool cuda_available(std::string* why) {
  if (why != nullptr)
    *why = no_cuda_reason;
  return false;
}

std::unique_ptr<device> make_cuda_device(int) {
  throw std::runtime_error(no_cuda_reason);
}
#endif

std::unique_ptr<device> make_device(const std::string& spec) {
  if (spec == "cpu")
    return make_cpu_device();
  if (spec == "cuda")
    return make_cuda_device(0);
  constexpr std::string_view prefix = "cuda:";
  if (spec.starts_with(prefix) && spec.size() > prefix.size()) {
    int ordinal = -1;
    const char* first = spec.data() + prefix.size();
    const char* last = spec.data() + spec.size();
    auto [end, ec] = std::from_chars(first, last, ordinal);
    if (ec == std::errc{} && end == last && ordinal >= 0)
      return make_cuda_device(ordinal);
  }
  throw std::invalid_argument("unknown device \"" + spec
                              + "\"; expected cpu, cuda or cuda:N");
}

} // namespace af::gpu
