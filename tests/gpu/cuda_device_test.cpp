// The CUDA device against the CPU device: every primitive, and a small
// model per layer type, on the same random inputs; results agree within
// float32 rounding (the dropout mask exactly). Where no GPU is present each
// case prints "SKIP: no GPU: <why>" and returns, and CTest counts it as
// skipped (tests/gpu/cuda_tests.cmake).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "actorflow/gpu/device.hpp"
#include "actorflow/gpu/model.hpp"
#include "actorflow/runtime/core/random.hpp"
#include "tests/gpu/cuda_twin.hpp"

using namespace af::gpu;
using namespace af::gpu::test;

namespace {

constexpr double tol = 1e-5;

} // namespace

TEST_CASE("cuda device: names its GPU, and bad requests throw naming the "
          "call") {
  auto d = devices_or_skip();
  if (!d)
    return;
  device& gpu = (*d)[1];
  CHECK(gpu.is_cuda());
  CHECK(gpu.name().rfind("cuda:0 (", 0) == 0);
  CHECK(gpu.name().back() == ')');
  CHECK_THROWS_AS(make_cuda_device(1 << 20), std::runtime_error);
  CHECK_THROWS_WITH(gpu.allocate(size_t{1} << 52),
                    Catch::Contains("cudaMalloc"));
  // The device still works after a failed call.
  darray a(gpu, 4 * sizeof(float));
  gpu.fill(a.f32(), 4, 2.5f);
  std::vector<float> v(4);
  gpu.download(v.data(), a.get(), 4 * sizeof(float));
  CHECK(v == std::vector<float>(4, 2.5f));
  conv2d_shape bad{1, 1, 8, 8, 2, 3, 3, 1, -1}; // negative padding
  CHECK_THROWS_WITH(gpu.conv2d_forward(bad, a.f32(), a.f32(), nullptr, a.f32()),
                    Catch::Contains("cudnnSetConvolution2dDescriptor"));
}

TEST_CASE("cuda device agrees with cpu: fill and copy") {
  auto d = devices_or_skip();
  if (!d)
    return;
  twin a(*d, random_floats(1000, 1));
  twin b(*d, 1000 * sizeof(float));
  for (int k = 0; k < 2; ++k) {
    (*d)[k].fill(b.f(k), 1000, -3.25f);
    (*d)[k].copy(b.f(k) + 100, a.f(k) + 200, 300 * sizeof(float));
  }
  CHECK(b.read(0) == b.read(1));
  auto v = b.read(1);
  CHECK(v[0] == -3.25f);
  CHECK(v[999] == -3.25f);
  CHECK(v[100] == a.read(1)[200]);
}

TEST_CASE("cuda device agrees with cpu: upload_async then wait_uploads") {
  auto d = devices_or_skip();
  if (!d)
    return;
  constexpr size_t n = 1 << 16;
  const auto first = random_floats(n, 2), second = random_floats(n, 3);
  for (int k = 0; k < 2; ++k) {
    device& dev = (*d)[k];
    auto* h1 = static_cast<float*>(dev.allocate_host(n * sizeof(float)));
    auto* h2 = static_cast<float*>(dev.allocate_host(n * sizeof(float)));
    std::memcpy(h1, first.data(), n * sizeof(float));
    std::memcpy(h2, second.data(), n * sizeof(float));
    darray a(dev, n * sizeof(float)), b(dev, n * sizeof(float));
    dev.fill(b.f32(), n, 1.0f);
    dev.upload_async(a.get(), h1, n * sizeof(float));
    dev.upload_async(b.get(), h2, n * sizeof(float));
    dev.wait_uploads();
    // The host buffers are free again once wait_uploads returned.
    std::memset(h1, 0, n * sizeof(float));
    std::memset(h2, 0, n * sizeof(float));
    dev.axpy(n, 2.0f, a.f32(), b.f32()); // b = second + 2 first
    std::vector<float> got(n);
    dev.download(got.data(), b.get(), n * sizeof(float));
    std::vector<float> want(n);
    for (size_t i = 0; i < n; ++i)
      want[i] = second[i] + 2.0f * first[i];
    require_close(want, got, tol, dev.name());
    dev.sync();
    dev.deallocate_host(h1);
    dev.deallocate_host(h2);
  }
}

TEST_CASE("cuda device agrees with cpu: gemm with every transpose") {
  auto d = devices_or_skip();
  if (!d)
    return;
  const int m = 37, n = 29, k = 53;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      twin a(*d, random_floats(size_t(m) * k, 10));
      twin b(*d, random_floats(size_t(k) * n, 11));
      twin c(*d, random_floats(size_t(m) * n, 12));
      for (int q = 0; q < 2; ++q)
        (*d)[q].gemm(ta, tb, m, n, k, 0.7f, a.f(q), b.f(q), 0.3f, c.f(q));
      require_close(c, tol,
                    std::string("gemm ta=") + (ta ? "1" : "0")
                      + " tb=" + (tb ? "1" : "0"));
    }
  // k = 0: C = beta C.
  twin c(*d, random_floats(6, 13));
  for (int q = 0; q < 2; ++q)
    (*d)[q].gemm(false, false, 2, 3, 0, 1.0f, c.f(q), c.f(q), 0.5f, c.f(q));
  require_close(c, tol, "gemm k=0");
}

TEST_CASE("cuda device agrees with cpu: axpy, add_bias, bias_grad and mul") {
  auto d = devices_or_skip();
  if (!d)
    return;
  const int m = 45, n = 17;
  const size_t mn = size_t(m) * n;
  twin x(*d, random_floats(mn, 20)), y(*d, random_floats(mn, 21));
  twin b(*d, random_floats(n, 22)), db(*d, random_floats(n, 23));
  twin z(*d, mn * sizeof(float));
  for (int k = 0; k < 2; ++k) {
    device& dev = (*d)[k];
    dev.axpy(mn, -1.5f, x.f(k), y.f(k));
    dev.add_bias(x.f(k), b.f(k), m, n);
    dev.bias_grad(y.f(k), db.f(k), m, n); // adds to db
    dev.mul(x.f(k), y.f(k), z.f(k), mn);
  }
  require_close(y, tol, "axpy");
  require_close(x, tol, "add_bias");
  require_close(db, tol, "bias_grad");
  require_close(z, tol, "mul");
}

TEST_CASE("cuda device agrees with cpu: relu forward and backward") {
  auto d = devices_or_skip();
  if (!d)
    return;
  const size_t n = 5000;
  auto xs = random_floats(n, 30);
  for (size_t i = 0; i < n; i += 7)
    xs[i] = 0.0f; // the gradient at exactly 0 is 0
  twin x(*d, xs), y(*d, n * sizeof(float)), dx(*d, n * sizeof(float));
  twin dy(*d, random_floats(n, 31));
  for (int k = 0; k < 2; ++k) {
    (*d)[k].relu_forward(x.f(k), y.f(k), n);
    (*d)[k].relu_backward(y.f(k), dy.f(k), dx.f(k), n);
  }
  CHECK(y.read(0) == y.read(1));
  CHECK(dx.read(0) == dx.read(1));
}

TEST_CASE("cuda device agrees with cpu: hwc_to_chw") {
  auto d = devices_or_skip();
  if (!d)
    return;
  CHECK((*d)[1].ordinal() == 0);
  const int n = 5, h = 17, w = 13, c = 3;
  const size_t total = size_t(n) * h * w * c;
  twin x(*d, random_floats(total, 50)), y(*d, total * sizeof(float));
  for (int k = 0; k < 2; ++k)
    (*d)[k].hwc_to_chw(x.f(k), y.f(k), n, h, w, c);
  CHECK(y.read(0) == y.read(1));
}

TEST_CASE("cuda device agrees with cpu: conv2d forward and backward") {
  struct variant {
    conv2d_shape s;
    bool bias, want_dx;
  };
  const variant variants[] = {
    {{2, 3, 9, 7, 4, 3, 3, 1, 1}, true, true},     // same padding
    {{3, 2, 10, 11, 5, 3, 2, 2, 0}, true, true},   // stride 2, 3x2 filter
    {{1, 4, 8, 8, 3, 5, 5, 2, 2}, false, true},    // stride 2, padding 2
    {{2, 6, 5, 4, 7, 1, 1, 1, 0}, true, false},    // pointwise
    {{2, 3, 13, 12, 2, 4, 4, 3, 1}, false, false}, // stride 3
  };
  auto d = devices_or_skip();
  if (!d)
    return;
  uint64_t seed = 40;
  for (const auto& v : variants) {
    const conv2d_shape& s = v.s;
    const size_t xn = size_t(s.n) * s.c * s.h * s.w;
    const size_t wn = size_t(s.k) * s.c * s.r * s.s;
    const size_t yn = size_t(s.n) * s.k * s.out_h() * s.out_w();
    twin x(*d, random_floats(xn, ++seed)), w(*d, random_floats(wn, ++seed));
    twin b(*d, random_floats(size_t(s.k), ++seed));
    twin dy(*d, random_floats(yn, ++seed));
    twin y(*d, yn * sizeof(float)), dx(*d, xn * sizeof(float));
    twin dw(*d, random_floats(wn, ++seed)); // overwritten
    twin db(*d, random_floats(size_t(s.k), ++seed));
    for (int k = 0; k < 2; ++k) {
      (*d)[k].conv2d_forward(s, x.f(k), w.f(k), v.bias ? b.f(k) : nullptr,
                             y.f(k));
      (*d)[k].conv2d_backward(s, x.f(k), w.f(k), dy.f(k),
                              v.want_dx ? dx.f(k) : nullptr, dw.f(k),
                              v.bias ? db.f(k) : nullptr);
    }
    std::ostringstream name;
    name << "conv2d n" << s.n << " c" << s.c << " " << s.h << "x" << s.w << " k"
         << s.k << " " << s.r << "x" << s.s << " stride " << s.stride << " pad "
         << s.pad;
    // Sums of up to a few hundred products, in another order than im2col.
    const double sum_tol = 1e-4;
    require_close(y, sum_tol, name.str() + ": y");
    require_close(dw, sum_tol, name.str() + ": dw");
    if (v.bias)
      require_close(db, sum_tol, name.str() + ": db");
    if (v.want_dx)
      require_close(dx, sum_tol, name.str() + ": dx");
  }
}

TEST_CASE("cuda device agrees with cpu: maxpool forward and backward") {
  const pool_shape shapes[] = {
    {2, 3, 8, 8, 2, 2}, // the usual
    {1, 2, 9, 7, 2, 2}, // odd sizes: the last row/column is dropped
    {2, 2, 9, 9, 3, 2}, // overlapping windows add up
    {1, 3, 6, 5, 2, 1}, // stride 1
  };
  auto d = devices_or_skip();
  if (!d)
    return;
  uint64_t seed = 60;
  for (const auto& s : shapes) {
    const size_t xn = size_t(s.n) * s.c * s.h * s.w;
    const size_t yn = size_t(s.n) * s.c * s.out_h() * s.out_w();
    twin x(*d, random_floats(xn, ++seed)), dy(*d, random_floats(yn, ++seed));
    twin y(*d, yn * sizeof(float)), dx(*d, random_floats(xn, ++seed));
    for (int k = 0; k < 2; ++k) {
      (*d)[k].maxpool_forward(s, x.f(k), y.f(k));
      (*d)[k].maxpool_backward(s, x.f(k), y.f(k), dy.f(k), dx.f(k));
    }
    std::ostringstream name;
    name << "maxpool " << s.h << "x" << s.w << " window " << s.window
         << " stride " << s.stride;
    CHECK(y.read(0) == y.read(1));
    require_close(dx, tol, name.str() + ": dx");
  }
}

TEST_CASE("cuda device agrees with cpu: dropout masks are identical") {
  auto d = devices_or_skip();
  if (!d)
    return;
  const size_t n = 100003;
  twin x(*d, random_floats(n, 70));
  for (float p : {0.0f, 0.25f, 0.5f, 0.9f}) {
    twin mask(*d, n * sizeof(float)), y(*d, n * sizeof(float));
    for (int k = 0; k < 2; ++k)
      (*d)[k].dropout_forward(p, 0x9e3779b97f4a7c15ULL + uint64_t(p * 100),
                              x.f(k), mask.f(k), y.f(k), n);
    INFO("p = " << p);
    auto m = mask.read(1);
    CHECK(mask.read(0) == m);
    CHECK(y.read(0) == y.read(1));
    size_t dropped = 0;
    for (float v : m)
      dropped += v == 0.0f ? 1 : 0;
    CHECK(std::fabs(double(dropped) / n - p) < 0.01);
  }
}

TEST_CASE("cuda device agrees with cpu: gather_rows and scatter_add_rows "
          "with repeated indices") {
  auto d = devices_or_skip();
  if (!d)
    return;
  const int rows = 7, dim = 5, m = 50; // 50 draws from 7 rows repeat
  twin table(*d, random_floats(size_t(rows) * dim, 80));
  twin idx(*d, random_ints(m, 81, rows));
  twin out(*d, size_t(m) * dim * sizeof(float));
  twin dout(*d, random_floats(size_t(m) * dim, 82));
  twin grad(*d, random_floats(size_t(rows) * dim, 83)); // adds to this
  for (int k = 0; k < 2; ++k) {
    (*d)[k].gather_rows(table.f(k), idx.i(k), out.f(k), m, dim);
    (*d)[k].scatter_add_rows(dout.f(k), idx.i(k), grad.f(k), m, dim);
  }
  CHECK(out.read(0) == out.read(1));
  require_close(grad, tol, "scatter_add_rows");
}

TEST_CASE("cuda device agrees with cpu: copy_columns") {
  auto d = devices_or_skip();
  if (!d)
    return;
  const int rows = 37, src_w = 11, dst_w = 19;
  twin src(*d, random_floats(size_t(rows) * src_w, 84));
  twin dst(*d, random_floats(size_t(rows) * dst_w, 85));
  for (int k = 0; k < 2; ++k)
    (*d)[k].copy_columns(dst.f(k) + 4, dst_w, src.f(k) + 2, src_w, rows, 7);
  CHECK(dst.read(0) == dst.read(1));
}

TEST_CASE("cuda device agrees with cpu: softmax_xent") {
  auto d = devices_or_skip();
  if (!d)
    return;
  const int m = 33, c = 10;
  for (double spread : {3.0, 80.0}) { // 80: probabilities underflow
    twin logits(*d, random_floats(size_t(m) * c, 90, -spread, spread));
    twin labels(*d, random_ints(m, 91, c));
    twin loss(*d, m * sizeof(float)), dlogits(*d, size_t(m) * c * 4);
    for (int k = 0; k < 2; ++k)
      (*d)[k].softmax_xent(logits.f(k), labels.i(k), m, c, loss.f(k),
                           dlogits.f(k), 1.0f / m);
    INFO("logits in +-" << spread);
    require_close(loss, 1e-4, "softmax_xent loss");
    require_close(dlogits, tol, "softmax_xent dlogits");
  }
}

TEST_CASE("cuda device agrees with cpu: sigmoid_bce") {
  auto d = devices_or_skip();
  if (!d)
    return;
  const int m = 200;
  auto z = random_floats(m, 100, -8, 8);
  z[0] = 60;
  z[1] = -60;
  z[2] = 0;
  std::vector<float> y(m);
  for (int i = 0; i < m; ++i)
    y[i] = float(i % 2);
  twin logits(*d, z), labels(*d, y);
  twin loss(*d, m * sizeof(float)), dlogits(*d, m * sizeof(float));
  for (int k = 0; k < 2; ++k)
    (*d)[k].sigmoid_bce(logits.f(k), labels.f(k), m, loss.f(k), dlogits.f(k),
                        0.5f);
  require_close(loss, tol, "sigmoid_bce loss");
  require_close(dlogits, tol, "sigmoid_bce dlogits");
}

// --- whole models: train_step gradients per layer type -----------------

namespace {

/// Builds `spec` on both devices with the same random parameters, runs one
/// train_step and one evaluate on the same batch and compares the losses,
/// every gradient and the logits.
/// `floats`: per sample, the last `floats` inputs of an id input are
/// floats (a features first layer): the ids [n, F] come first, then real
/// floats [n, floats].
void require_models_agree(devices& d, const model_spec& spec, int n,
                          int64_t embedding_rows = 0, int64_t floats = 0) {
  model a(spec, d[0]), b(spec, d[1]);
  model* models[2] = {&a, &b};
  const auto& params = a.params();
  for (size_t i = 0; i < params.size(); ++i) {
    int64_t size = params[i].size();
    if (params[i].sparse) {
      size = embedding_rows * params[i].row_size();
      a.set_local_rows(i, embedding_rows);
      b.set_local_rows(i, embedding_rows);
    }
    auto v = random_floats(size_t(size), 200 + i, -0.5, 0.5);
    for (int k = 0; k < 2; ++k)
      d[k].upload(models[k]->value(i).get(), v.data(), v.size() * 4);
  }

  int64_t per_sample = 1;
  for (auto s : spec.input_shape)
    per_sample *= s;
  const size_t xn = size_t(n) * size_t(per_sample);
  std::unique_ptr<twin> x;
  if (embedding_rows > 0) {
    auto ids = size_t(n) * size_t(per_sample - floats);
    auto host = random_ints(ids, 300, int32_t(embedding_rows));
    auto tail = random_floats(xn - ids, 302);
    host.resize(xn);
    std::memcpy(host.data() + ids, tail.data(), tail.size() * sizeof(float));
    x = std::make_unique<twin>(d, host);
  } else {
    x = std::make_unique<twin>(d, random_floats(xn, 300));
  }
  const bool softmax = spec.loss == "softmax_cross_entropy";
  const int classes = int(output_width(spec));
  std::vector<float> float_labels(n);
  for (int i = 0; i < n; ++i)
    float_labels[i] = float(i % 2);
  twin labels = softmax ? twin(d, random_ints(size_t(n), 301, classes))
                        : twin(d, float_labels);

  model::step_result r[2];
  for (int k = 0; k < 2; ++k)
    r[k] = models[k]->train_step(x->get(k), labels.get(k), n, 42);
  CHECK(std::fabs(r[0].loss_sum - r[1].loss_sum)
        <= 1e-4 * (1 + std::fabs(r[0].loss_sum)));
  for (size_t i = 0; i < params.size(); ++i) {
    const size_t floats =
      size_t(params[i].sparse ? embedding_rows * params[i].row_size()
                              : params[i].size());
    std::vector<float> g[2];
    for (int k = 0; k < 2; ++k) {
      g[k].resize(floats);
      d[k].download(g[k].data(), models[k]->grad(i).get(), floats * 4);
    }
    require_close(g[0], g[1], 1e-4, "gradient of " + params[i].name);
  }

  std::vector<float> logits[2];
  for (int k = 0; k < 2; ++k)
    models[k]->evaluate(x->get(k), labels.get(k), n, &logits[k]);
  require_close(logits[0], logits[1], 1e-4, "evaluate logits");
}

layer_spec dense(int64_t units) {
  layer_spec l;
  l.type = "dense";
  l.units = units;
  return l;
}

layer_spec plain(const char* type) {
  layer_spec l;
  l.type = type;
  return l;
}

} // namespace

TEST_CASE("cuda device agrees with cpu: model with dense and relu") {
  auto d = devices_or_skip();
  if (!d)
    return;
  model_spec spec;
  spec.input_shape = {12};
  spec.layers = {dense(8), plain("relu"), dense(5)};
  spec.loss = "softmax_cross_entropy";
  require_models_agree(*d, spec, 9);
}

TEST_CASE("cuda device agrees with cpu: model with conv2d, maxpool2d, "
          "flatten and dense") {
  auto d = devices_or_skip();
  if (!d)
    return;
  layer_spec conv = plain("conv2d");
  conv.filters = 4;
  conv.kernel = 3;
  conv.padding = 1;
  model_spec spec;
  spec.input_shape = {2, 9, 9};
  spec.layers = {conv, plain("relu"), plain("maxpool2d"), plain("flatten"),
                 dense(3)};
  spec.loss = "softmax_cross_entropy";
  require_models_agree(*d, spec, 5);
}

TEST_CASE("cuda device agrees with cpu: model with embedding, flatten and "
          "dense") {
  auto d = devices_or_skip();
  if (!d)
    return;
  layer_spec emb = plain("embedding");
  emb.rows = 1000;
  emb.dim = 6;
  model_spec spec;
  spec.input_shape = {4};
  spec.layers = {emb, plain("flatten"), dense(1)};
  spec.loss = "sigmoid_binary_cross_entropy";
  require_models_agree(*d, spec, 8, /*embedding_rows=*/10);
}

TEST_CASE("cuda device agrees with cpu: model with named inputs (features, "
          "dense)") {
  auto d = devices_or_skip();
  if (!d)
    return;
  layer_spec f = plain("features");
  f.rows = 1000;
  f.dim = 6;
  f.ids = 3;
  model_spec spec;
  spec.input_shape = {3 + 2}; // 3 ids, then 2 floats
  spec.layers = {f, dense(4), plain("relu"), dense(1)};
  spec.loss = "sigmoid_binary_cross_entropy";
  require_models_agree(*d, spec, 8, /*embedding_rows=*/10, /*floats=*/2);
}

TEST_CASE("cuda device agrees with cpu: model with dropout") {
  auto d = devices_or_skip();
  if (!d)
    return;
  layer_spec drop = plain("dropout");
  drop.rate = 0.4;
  model_spec spec;
  spec.input_shape = {16};
  spec.layers = {dense(12), drop, dense(3)};
  spec.loss = "softmax_cross_entropy";
  require_models_agree(*d, spec, 7);
}
