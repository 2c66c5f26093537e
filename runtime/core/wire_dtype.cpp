// The dtype of values on the parameter-server wire (Training.ps.wire):
// gradients and parameters may travel in 16 bits while the shards keep f32
// master values. Declared in runtime/core/wire_dtype.hpp.
#include "actorflow/runtime/core/wire_dtype.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include <Eigen/Core>
#include <cpuid.h>
#include <immintrin.h>

namespace af {

namespace {

// Eigen's bfloat16 and half convert one value per call, about 1 ns each
// here: 4 ms per step of a 940,000-parameter model, more than the step.
// So where the CPU has AVX2 (bf16) or F16C (f16) the conversions below do
// 8 or 16 values an instruction, and Eigen's types do the rest (f16) or
// are the reference the tests compare with (bf16, whose rounding is a few
// integer operations, the same as Eigen's).

// f32 -> bf16, round to nearest even; NaN stays a (quiet) NaN.
uint16_t bf16_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float f32_of_bf16(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// 8 values rounded as bf16_of does, in the low halves of 32-bit lanes.
__attribute__((target("avx2"))) inline __m256i bf16_round_avx2(__m256 x) {
  auto u = _mm256_castps_si256(x);
  auto lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  auto up =
    _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
  auto rounded = _mm256_srli_epi32(up, 16);
  auto nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  auto quiet =
    _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

// 16 values an iteration with AVX2.
__attribute__((target("avx2"))) void narrow_bf16_avx2(const float* src,
                                                      uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    auto a = bf16_round_avx2(_mm256_loadu_ps(src + i));
    auto b = bf16_round_avx2(_mm256_loadu_ps(src + i + 8));
    // packus interleaves the 128-bit lanes; the permute puts them back.
    auto packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), packed);
  }
  for (; i < n; ++i)
    dst[i] = bf16_of(src[i]);
}

__attribute__((target("avx2"))) void widen_bf16_avx2(const uint16_t* src,
                                                     float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    auto w = _mm256_cvtepu16_epi32(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  }
  for (; i < n; ++i)
    dst[i] = f32_of_bf16(src[i]);
}

bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}

void narrow_bf16(const float* src, uint16_t* dst, size_t n) {
  if (has_avx2())
    return narrow_bf16_avx2(src, dst, n);
  for (size_t i = 0; i < n; ++i)
    dst[i] = bf16_of(src[i]);
}

void widen_bf16(const uint16_t* src, float* dst, size_t n) {
  if (has_avx2())
    return widen_bf16_avx2(src, dst, n);
  for (size_t i = 0; i < n; ++i)
    dst[i] = f32_of_bf16(src[i]);
}

// f16 through the F16C instructions where the CPU has them (8 values an
// instruction), else Eigen's half, a value at a time. Values beyond f16's
// range saturate at +-65504 first; NaN stays NaN.
constexpr float f16_max = 65504.0f;

__attribute__((target("avx,f16c"))) void
narrow_f16_f16c(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  auto hi = _mm256_set1_ps(f16_max), lo = _mm256_set1_ps(-f16_max);
  for (; i + 8 <= n; i += 8) {
    auto x = _mm256_loadu_ps(src + i);
    // min/max return their second operand for NaN: x stays NaN.
    x = _mm256_max_ps(lo, _mm256_min_ps(hi, x));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i)
    dst[i] = Eigen::numext::bit_cast<uint16_t>(
      Eigen::half(std::clamp(src[i], -f16_max, f16_max)));
}

__attribute__((target("avx,f16c"))) void widen_f16_f16c(const uint16_t* src,
                                                        float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i)
    dst[i] = static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(src[i]));
}

// (clang 14's __builtin_cpu_supports knows no "f16c": CPUID's bit, on top
// of the AVX check, which includes the OS's saving of the AVX registers.)
bool has_f16c() {
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &a, &b, &c, &d) != 0
           && (c & bit_F16C) != 0;
  }();
  return yes;
}

void narrow_f16(const float* src, uint16_t* dst, size_t n) {
  if (has_f16c())
    return narrow_f16_f16c(src, dst, n);
  for (size_t i = 0; i < n; ++i)
    // std::clamp keeps NaN (every comparison with it is false).
    dst[i] = Eigen::numext::bit_cast<uint16_t>(
      Eigen::half(std::clamp(src[i], -f16_max, f16_max)));
}

void widen_f16(const uint16_t* src, float* dst, size_t n) {
  if (has_f16c())
    return widen_f16_f16c(src, dst, n);
  for (size_t i = 0; i < n; ++i)
    dst[i] = static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(src[i]));
}

tensor narrow_as(const tensor& values, dtype to) {
  auto out = tensor::allocate(to, values.shape());
  auto n = static_cast<size_t>(values.elements());
  (to == dtype::bf16 ? narrow_bf16 : narrow_f16)(
    values.data_as<float>(), out.mutable_data_as<uint16_t>(), n);
  return out;
}

tensor widen_as(const tensor& values) {
  auto out = tensor::allocate(dtype::f32, values.shape());
  auto n = static_cast<size_t>(values.elements());
  (values.type() == dtype::bf16 ? widen_bf16 : widen_f16)(
    values.data_as<uint16_t>(), out.mutable_data_as<float>(), n);
  return out;
}

} // namespace

std::optional<dtype> wire_dtype_of(const std::string& name) {
  if (name == "f32")
    return dtype::f32;
  if (name == "bf16")
    return dtype::bf16;
  if (name == "f16")
    return dtype::f16;
  return std::nullopt;
}

tensor narrow_values(const tensor& values, dtype to) {
  if (values.type() != dtype::f32)
    throw std::invalid_argument(std::string{"narrow_values: f32 values "
                                            "expected, got "}
                                + dtype_name(values.type()));
  switch (to) {
    case dtype::f32:
      return values;
    case dtype::bf16:
    case dtype::f16:
      return narrow_as(values, to);
    default:
      throw std::invalid_argument(std::string{"narrow_values: no wire dtype "}
                                  + dtype_name(to));
  }
}

tensor widen_values(const tensor& values) {
  switch (values.type()) {
    case dtype::f32:
      return values;
    case dtype::bf16:
    case dtype::f16:
      return widen_as(values);
    default:
      throw std::invalid_argument(
        std::string{"values must be f32, bf16 or f16, got "}
        + dtype_name(values.type()));
  }
}

} // namespace af
