// The 16-bit values of the parameter-server wire (runtime/core/wire_dtype.hpp):
// rounding to nearest even, f16's saturation, NaN, and exact widening.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <Eigen/Core>

#include "actorflow/runtime/core/wire_dtype.hpp"

using namespace af;

namespace {

tensor f32(const std::vector<float>& v) {
  auto t = tensor::allocate(dtype::f32, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.mutable_data_as<float>());
  return t;
}

std::vector<uint16_t> bits(const tensor& t) {
  auto* p = t.data_as<uint16_t>();
  return {p, p + t.elements()};
}

std::vector<float> floats(const tensor& t) {
  auto* p = t.data_as<float>();
  return {p, p + t.elements()};
}

} // namespace

TEST_CASE("bf16 on the wire keeps f32's range and rounds to nearest even",
          "[wire]") {
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: even (1) wins;
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: even wins.
  auto t = narrow_values(f32({1.0f, -2.0f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f,
                              1e30f, std::numeric_limits<float>::infinity()}),
                         dtype::bf16);
  CHECK(t.type() == dtype::bf16);
  CHECK(t.shape() == tensor::shape_type{6});
  auto b = bits(t);
  CHECK(b[0] == 0x3f80);
  CHECK(b[1] == 0xc000);
  CHECK(b[2] == 0x3f80);
  CHECK(b[3] == 0x3f82);
  auto back = floats(widen_values(t));
  CHECK(back[4] == Approx(1e30f).epsilon(0.004)); // 8 bits of mantissa
  CHECK(std::isinf(back[5]));
}

TEST_CASE("f16 on the wire saturates instead of overflowing", "[wire]") {
  auto t = narrow_values(f32({1.0f, 70000.0f, -1e9f, 0.1f, 1e-6f}), dtype::f16);
  CHECK(t.type() == dtype::f16);
  auto b = bits(t);
  CHECK(b[0] == 0x3c00);
  CHECK(b[1] == 0x7bff); // 65504, not inf
  CHECK(b[2] == 0xfbff); // -65504
  auto back = floats(widen_values(t));
  CHECK(back[3] == Approx(0.1f).epsilon(0.001));
  CHECK(back[4] == Approx(1e-6f).epsilon(0.05)); // a subnormal
}

TEST_CASE("NaN stays NaN, and values of 16 bits widen exactly", "[wire]") {
  for (auto wire : {dtype::bf16, dtype::f16}) {
    CAPTURE(dtype_name(wire));
    auto nan = narrow_values(f32({std::nanf("")}), wire);
    CHECK(std::isnan(floats(widen_values(nan))[0]));
    // Values with few mantissa bits survive the round trip unchanged.
    std::vector<float> exact{0.0f, -0.0f, 1.5f, -0.375f, 1024.0f, 0.125f};
    CHECK(floats(widen_values(narrow_values(f32(exact), wire))) == exact);
  }
  auto same = f32({1.0f});
  CHECK(narrow_values(same, dtype::f32).data() == same.data());
  CHECK(widen_values(same).data() == same.data());
}

TEST_CASE("the vectorized conversions agree with Eigen's, bit for bit",
          "[wire]") {
  // Every kind of value, at lengths that leave a tail after the vector
  // loops (16 and 8 values an iteration).
  std::vector<float> v;
  uint32_t x = 12345;
  for (int i = 0; i < 4099; ++i) {
    x = x * 1664525u + 1013904223u; // any bit pattern: NaNs, subnormals too
    float f;
    std::memcpy(&f, &x, sizeof f);
    v.push_back(f);
  }
  for (float f :
       {0.0f, -0.0f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 65504.0f, 65520.0f,
        7e4f, -7e4f, 6e-8f, 3e-8f, std::numeric_limits<float>::infinity(),
        -std::numeric_limits<float>::infinity(),
        std::numeric_limits<float>::denorm_min()})
    v.push_back(f);
  for (size_t n : {v.size(), size_t{15}, size_t{7}, size_t{1}}) {
    CAPTURE(n);
    std::vector<float> part(v.begin(), v.begin() + static_cast<long>(n));
    auto b = bits(narrow_values(f32(part), dtype::bf16));
    auto h = bits(narrow_values(f32(part), dtype::f16));
    auto bw = floats(widen_values(narrow_values(f32(part), dtype::bf16)));
    auto hw = floats(widen_values(narrow_values(f32(part), dtype::f16)));
    for (size_t i = 0; i < n; ++i) {
      CAPTURE(i, part[i]);
      auto eb = Eigen::bfloat16(part[i]);
      auto clamped = std::isnan(part[i])
                       ? part[i]
                       : std::min(std::max(part[i], -65504.0f), 65504.0f);
      auto eh = Eigen::half(clamped);
      if (std::isnan(part[i])) {
        CHECK(std::isnan(bw[i]));
        CHECK(std::isnan(hw[i]));
        continue;
      }
      CHECK(b[i] == Eigen::numext::bit_cast<uint16_t>(eb));
      CHECK(h[i] == Eigen::numext::bit_cast<uint16_t>(eh));
      CHECK(bw[i] == static_cast<float>(eb));
      CHECK(hw[i] == static_cast<float>(eh));
    }
  }
}

TEST_CASE("only f32 narrows, and only to a wire dtype", "[wire]") {
  auto ints = tensor::allocate(dtype::i32, {2});
  CHECK_THROWS_WITH(narrow_values(ints, dtype::bf16),
                    Catch::Contains("f32 values expected, got i32"));
  CHECK_THROWS_WITH(narrow_values(f32({1.0f}), dtype::i64),
                    Catch::Contains("no wire dtype i64"));
  CHECK_THROWS_WITH(widen_values(ints),
                    Catch::Contains("must be f32, bf16 or f16, got i32"));
  CHECK(wire_dtype_of("bf16") == dtype::bf16);
  CHECK(wire_dtype_of("f16") == dtype::f16);
  CHECK(wire_dtype_of("f32") == dtype::f32);
  CHECK_FALSE(wire_dtype_of("fp16"));
}
