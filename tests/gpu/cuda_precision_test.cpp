// The CUDA device's precision modes and step timing against the CPU
// device (label `gpu`; "SKIP: no GPU: <why>" without one).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "actorflow/gpu/device.hpp"
#include "actorflow/gpu/model.hpp"
#include "tests/gpu/cuda_twin.hpp"

using namespace af::gpu;
using namespace af::gpu::test;

TEST_CASE("cuda device: tf32 and bf16 GEMMs agree with fp32 within their "
          "rounding") {
  auto d = devices_or_skip();
  if (!d)
    return;
  const int m = 96, n = 80, k = 256;
  auto av = random_floats(size_t(m) * k, 40),
       bv = random_floats(size_t(k) * n, 41);
  twin a(*d, av), b(*d, bv);
  twin c(*d, size_t(m) * n * sizeof(float));
  (*d)[0].gemm(false, true, m, n, k, 1.0f, a.f(0), b.f(0), 0.0f, c.f(0));
  (*d)[1].gemm(false, true, m, n, k, 1.0f, a.f(1), b.f(1), 0.0f, c.f(1));
  const auto exact = c.read(0);
  require_close(exact, c.read(1), 1e-4, "fp32 gemm");
  // Inputs rounded to 10 (tf32) or 7 (bf16) mantissa bits, sums of 256
  // products of values in [-1, 1]: errors grow like sqrt(k) * 2^-bits.
  for (auto [p, tol] :
       {std::pair{precision::tf32, 2e-2}, std::pair{precision::bf16, 1.5e-1}}) {
    (*d)[1].set_precision(p);
    (*d)[1].gemm(false, true, m, n, k, 1.0f, a.f(1), b.f(1), 0.0f, c.f(1));
    auto got = c.read(1);
    require_close(exact, got, tol, std::string("gemm ") + precision_name(p));
  }
  (*d)[1].set_precision(precision::fp32);
  (*d)[1].gemm(false, true, m, n, k, 1.0f, a.f(1), b.f(1), 0.0f, c.f(1));
  require_close(exact, c.read(1), 1e-4, "fp32 gemm again");
}

TEST_CASE("cuda device: each precision rounds GEMM inputs as it says") {
  auto d = devices_or_skip();
  if (!d)
    return;
  device& gpu = (*d)[1];
  // A [256 x 256] all 1 + 2^-12 or all 1 + 2^-9, B all 1: C = 256 a.
  // float32 keeps both; TF32 (10-bit mantissa) rounds 1 + 2^-12 to 1 and
  // keeps 1 + 2^-9; bfloat16 (7 bits) rounds both to 1. Sums of 256
  // equal terms are exact in float32.
  const int n = 256;
  const size_t nn = size_t(n) * n;
  darray a(gpu, nn * 4), b(gpu, nn * 4), c(gpu, nn * 4);
  gpu.fill(b.f32(), nn, 1.0f);
  auto product = [&](precision p, float value) {
    gpu.set_precision(p);
    gpu.fill(a.f32(), nn, value);
    gpu.gemm(false, false, n, n, n, 1.0f, a.f32(), b.f32(), 0.0f, c.f32());
    std::vector<float> out(nn);
    gpu.download(out.data(), c.get(), nn * 4);
    return out;
  };
  const float small = 1.0f + 0x1p-12f, large = 1.0f + 0x1p-9f;
  auto check_all = [](const std::vector<float>& v, float want,
                      const char* what) {
    size_t bad = 0;
    for (float x : v)
      bad += x != want;
    INFO(what << ": want every element " << want << ", got " << v[0]
              << " first, " << bad << " of " << v.size() << " differ");
    CHECK(bad == 0);
  };
  check_all(product(precision::fp32, small), 256.0f * small, "fp32");
  check_all(product(precision::fp32, large), 256.0f * large, "fp32");
  const char* off = std::getenv("NVIDIA_TF32_OVERRIDE");
  if (off != nullptr && std::string(off) == "0") {
    // NVIDIA's libraries then compute tf32 and bf16 requests in fp32.
    WARN("NVIDIA_TF32_OVERRIDE=0: the tf32 and bf16 rounding is not checked");
    return;
  }
  check_all(product(precision::tf32, small), 256.0f, "tf32 of 1 + 2^-12");
  check_all(product(precision::tf32, large), 256.0f * large,
            "tf32 of 1 + 2^-9");
  check_all(product(precision::bf16, large), 256.0f, "bf16 of 1 + 2^-9");
  gpu.set_precision(precision::fp32);
}

TEST_CASE("cuda device: tf32 convolutions agree with the cpu's within TF32 "
          "rounding") {
  auto d = devices_or_skip();
  if (!d)
    return;
  conv2d_shape s{8, 16, 14, 14, 32, 3, 3, 1, 1};
  const size_t xn = size_t(s.n) * s.c * s.h * s.w;
  const size_t wn = size_t(s.k) * s.c * s.r * s.s;
  const size_t yn = size_t(s.n) * s.k * s.out_h() * s.out_w();
  twin x(*d, random_floats(xn, 50)), w(*d, random_floats(wn, 51, -0.2, 0.2));
  twin bias(*d, random_floats(size_t(s.k), 52));
  twin y(*d, yn * sizeof(float)), dy(*d, random_floats(yn, 53));
  twin dx(*d, xn * sizeof(float)), dw(*d, wn * sizeof(float));
  twin db(*d, size_t(s.k) * sizeof(float));
  (*d)[1].set_precision(precision::tf32);
  for (int q = 0; q < 2; ++q) {
    (*d)[q].conv2d_forward(s, x.f(q), w.f(q), bias.f(q), y.f(q));
    (*d)[q].conv2d_backward(s, x.f(q), w.f(q), dy.f(q), dx.f(q), dw.f(q),
                            db.f(q));
  }
  require_close(y, 2e-2, "tf32 conv forward");
  require_close(dx, 2e-2, "tf32 conv backward data");
  // 8 * 14 * 14 products per filter tap.
  require_close(dw, 1e-1, "tf32 conv backward filter");
  require_close(db, 1e-4, "bias gradient (no GEMM)");
}

TEST_CASE("cuda device: a CNN's train_step in tf32 and bf16 stays close to "
          "fp32 on the cpu") {
  auto d = devices_or_skip();
  if (!d)
    return;
  layer_spec conv;
  conv.type = "conv2d";
  conv.filters = 8;
  conv.kernel = 3;
  layer_spec relu, pool, dense;
  relu.type = "relu";
  pool.type = "maxpool2d";
  dense.type = "dense";
  dense.units = 10;
  model_spec spec;
  spec.input_shape = {1, 12, 12};
  spec.layers = {conv, relu, pool, dense};
  spec.loss = "softmax_cross_entropy";
  const int n = 32;
  for (auto p : {precision::tf32, precision::bf16}) {
    INFO(precision_name(p));
    (*d)[1].set_precision(p);
    model a(spec, (*d)[0]), b(spec, (*d)[1]);
    model* models[2] = {&a, &b};
    for (size_t i = 0; i < a.params().size(); ++i) {
      auto v = random_floats(size_t(a.params()[i].size()), 60 + i, -0.3, 0.3);
      for (int q = 0; q < 2; ++q)
        (*d)[q].upload(models[q]->value(i).get(), v.data(), v.size() * 4);
    }
    twin x(*d, random_floats(size_t(n) * 144, 70));
    twin labels(*d, random_ints(size_t(n), 71, 10));
    model::step_result r[2];
    for (int q = 0; q < 2; ++q)
      r[q] = models[q]->train_step(x.get(q), labels.get(q), n, 7);
    CHECK(std::fabs(r[0].loss_sum - r[1].loss_sum)
          <= 2e-2 * std::fabs(r[0].loss_sum));
    for (size_t i = 0; i < a.params().size(); ++i) {
      auto floats = size_t(a.params()[i].size());
      std::vector<float> g[2];
      for (int q = 0; q < 2; ++q) {
        g[q].resize(floats);
        (*d)[q].download(g[q].data(), models[q]->grad(i).get(), floats * 4);
      }
      require_close(g[0], g[1], 1e-1, "gradient of " + a.params()[i].name);
    }
  }
  (*d)[1].set_precision(precision::fp32);
}

TEST_CASE("cuda device: step timing counts each kind of work on its stream") {
  auto d = devices_or_skip();
  if (!d)
    return;
  device& gpu = (*d)[1];
  const size_t n = size_t{8} << 20; // 32 MiB
  auto* host = static_cast<float*>(gpu.allocate_host(n * sizeof(float)));
  darray a(gpu, n * sizeof(float)), b(gpu, n * sizeof(float));
  gpu.upload(a.get(), host, n * sizeof(float));
  CHECK(gpu.take_times().param_upload == 0); // timing is off

  gpu.set_timing(true);
  gpu.upload(a.get(), host, n * sizeof(float));
  gpu.upload_async(b.get(), host, n * sizeof(float));
  gpu.wait_uploads();
  gpu.compute_begin();
  for (int i = 0; i < 200; ++i)
    gpu.gemm(false, false, 1024, 1024, 1024, 1.0f, a.f32(), b.f32(), 0.0f,
             a.f32() + (size_t{1} << 20));
  gpu.upload(b.get(), host, n * sizeof(float)); // inside: compute
  gpu.compute_end();
  gpu.download(host, a.get(), n * sizeof(float));
  gpu.sync();
  auto t = gpu.take_times();
  // 32 MiB at tens of GB/s: about a millisecond each way.
  CHECK(t.param_upload > 1e-4);
  CHECK(t.input_upload > 1e-4);
  CHECK(t.download > 1e-4);
  // 200 GEMMs of 2 GFLOP each (several milliseconds even at the H200's
  // fp32 peak), plus the copy.
  CHECK(t.compute > t.param_upload);
  CHECK(t.param_upload < 0.1);
  gpu.set_timing(false);
  auto again = gpu.take_times();
  CHECK(again.compute == 0);
  CHECK(again.param_upload == 0);
  gpu.deallocate_host(host);
}
