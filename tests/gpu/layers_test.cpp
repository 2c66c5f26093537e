// Layers, losses and models on the CPU device: every backward against
// central finite differences, the primitives against naive references, and
// the spec checks' error messages.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "actorflow/gpu/device.hpp"
#include "actorflow/gpu/layers.hpp"
#include "actorflow/gpu/model.hpp"
#include "actorflow/runtime/core/random.hpp"

using namespace af::gpu;
using Catch::Matchers::Contains;

namespace {

device& cpu() {
  static auto dev = make_cpu_device();
  return *dev;
}

std::vector<float> uniform(size_t n, uint64_t seed, float lo, float hi) {
  af::record_rng rng{seed};
  std::vector<float> v(n);
  for (auto& x : v)
    x = static_cast<float>(rng.uniform(lo, hi));
  return v;
}

template <class T>
darray to_device(const std::vector<T>& host) {
  darray d(cpu(), host.size() * sizeof(T));
  cpu().upload(d.get(), host.data(), host.size() * sizeof(T));
  return d;
}

template <class T>
void upload(darray& d, const std::vector<T>& host) {
  cpu().upload(d.get(), host.data(), host.size() * sizeof(T));
}

template <class T = float>
std::vector<T> to_host(const darray& d, size_t n) {
  std::vector<T> v(n);
  cpu().download(v.data(), d.get(), n * sizeof(T));
  return v;
}

/// All of 0..size-1 when there are few, else `count` of them at random.
std::vector<size_t> pick(size_t size, size_t count, uint64_t seed) {
  std::vector<size_t> all(size);
  std::iota(all.begin(), all.end(), size_t{0});
  if (size <= count)
    return all;
  af::record_rng rng{seed};
  for (size_t i = 0; i < count; ++i)
    std::swap(all[i], all[i + rng.below(size - i)]);
  all.resize(count);
  return all;
}

/// Compares analytic derivatives with central differences taken at eps and
/// at eps / 2. Where the two differences disagree a kink (relu, a max
/// changing hands) lies within eps and the element is skipped, not failed;
/// tests then require that few are.
struct grad_checker {
  float eps = 1e-2f;
  double rel = 1e-2, abs = 2e-3;
  int checked = 0, skipped = 0;

  bool close(double a, double b) const {
    return std::abs(a - b) <= rel * std::max(std::abs(a), std::abs(b)) + abs;
  }

  /// `element` is the host copy of the value; `sync` uploads it and `loss`
  /// evaluates the loss at the values uploaded.
  void check(const std::string& what, size_t index, float& element,
             double analytic, const std::function<void()>& sync,
             const std::function<double()>& loss) {
    float original = element;
    auto difference = [&](float h) {
      float up = original + h, down = original - h;
      element = up;
      sync();
      double l_up = loss();
      element = down;
      sync();
      double l_down = loss();
      element = original;
      sync();
      return (l_up - l_down) / (static_cast<double>(up) - down);
    };
    double coarse = difference(eps), fine = difference(eps / 2);
    if (!close(coarse, fine)) {
      ++skipped;
      return;
    }
    ++checked;
    INFO(what << "[" << index << "]: analytic " << analytic << ", numeric "
              << fine);
    CHECK(close(analytic, fine));
  }

  void require_enough() const {
    INFO("checked " << checked << ", skipped at kinks " << skipped);
    REQUIRE(checked > 0);
    CHECK(skipped * 10 <= checked);
  }
};

/// One layer with its input and parameter values on the host.
struct layer_case {
  std::unique_ptr<layer> l;
  int n = 2;
  std::vector<float> x;     // float input
  std::vector<int32_t> ids; // embedding input
  std::vector<std::vector<float>> values;
  bool training = false;
};

layer_case make_case(const layer_spec& spec, std::vector<int64_t> in_shape,
                     int n, uint64_t seed) {
  layer_case c;
  c.l = make_layer(0, spec, in_shape);
  c.n = n;
  if (!c.l->takes_ids())
    c.x = uniform(static_cast<size_t>(n * c.l->in_size()), seed, -1, 1);
  for (size_t j = 0; j < c.l->params().size(); ++j)
    c.values.push_back(uniform(static_cast<size_t>(c.l->params()[j].size()),
                               seed + 1 + j, -0.5f, 0.5f));
  return c;
}

/// Checks the gradients of loss = sum(G * y), G random, with respect to
/// every parameter (a random subset of elements each) and, where the input
/// is float, the input.
void check_layer(layer_case& c, grad_checker& gc, size_t per_tensor = 30) {
  layer& l = *c.l;
  auto out = static_cast<size_t>(c.n * l.out_size());
  auto in = static_cast<size_t>(c.n * l.in_size());
  darray x = c.ids.empty() ? to_device(c.x) : to_device(c.ids);
  std::vector<darray> values, grads;
  std::vector<param_ref> refs;
  for (auto& v : c.values) {
    values.push_back(to_device(v));
    grads.emplace_back(cpu(), v.size() * sizeof(float));
    refs.push_back({values.back().f32(), grads.back().f32(),
                    static_cast<int64_t>(v.size())});
  }
  auto upstream = uniform(out, 99, -1, 1);
  darray y(cpu(), out * sizeof(float));
  darray dy = to_device(upstream);
  darray dx(cpu(), in * sizeof(float));
  pass p{cpu(), c.n, c.training, 1234};

  auto loss = [&] {
    l.forward(p, x.get(), y.f32(), refs);
    auto host = to_host(y, out);
    double sum = 0;
    for (size_t i = 0; i < out; ++i)
      sum += static_cast<double>(upstream[i]) * host[i];
    return sum;
  };
  loss();
  bool float_input = c.ids.empty();
  l.backward(p, x.get(), y.f32(), dy.f32(), float_input ? dx.f32() : nullptr,
             refs);

  for (size_t j = 0; j < c.values.size(); ++j) {
    auto analytic = to_host(grads[j], c.values[j].size());
    for (size_t e : pick(c.values[j].size(), per_tensor, 7 + j))
      gc.check(
        l.params()[j].name, e, c.values[j][e], analytic[e],
        [&] { upload(values[j], c.values[j]); }, loss);
  }
  if (float_input) {
    auto analytic = to_host(dx, in);
    for (size_t e : pick(in, per_tensor, 3))
      gc.check(
        "input", e, c.x[e], analytic[e], [&] { upload(x, c.x); }, loss);
  }
  gc.require_enough();
}

layer_spec spec_of(std::string type) {
  layer_spec s;
  s.type = std::move(type);
  return s;
}

/// A message from param_specs, or "(no error)".
std::string spec_error(const model_spec& spec) {
  try {
    param_specs(spec);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

} // namespace

// --- layer gradients -------------------------------------------------

TEST_CASE("dense backward matches finite differences", "[layers]") {
  auto s = spec_of("dense");
  s.units = 5;
  auto c = make_case(s, {7}, 3, 1);
  grad_checker gc;
  check_layer(c, gc);
}

TEST_CASE("dense flattens an image input and its gradients match", "[layers]") {
  auto s = spec_of("dense");
  s.units = 3;
  auto c = make_case(s, {2, 3, 2}, 2, 2);
  CHECK(c.l->params()[0].shape == std::vector<int64_t>{12, 3});
  grad_checker gc;
  check_layer(c, gc);
}

TEST_CASE("conv2d backward matches finite differences", "[layers]") {
  struct geometry {
    int64_t kernel, stride, padding;
  };
  for (auto g : {geometry{3, 1, 0}, geometry{3, 2, 1}, geometry{1, 1, 0},
                 geometry{2, 1, 2}}) {
    DYNAMIC_SECTION("kernel " << g.kernel << " stride " << g.stride
                              << " padding " << g.padding) {
      auto s = spec_of("conv2d");
      s.filters = 3;
      s.kernel = g.kernel;
      s.stride = g.stride;
      s.padding = g.padding;
      auto c = make_case(s, {2, 5, 6}, 2, 3);
      grad_checker gc;
      check_layer(c, gc, 40);
    }
  }
}

TEST_CASE("relu backward matches finite differences away from 0", "[layers]") {
  auto c = make_case(spec_of("relu"), {4, 3}, 3, 4);
  // |x| >= 0.1 > eps: no difference straddles the kink.
  for (auto& v : c.x)
    v = v < 0 ? v - 0.1f : v + 0.1f;
  grad_checker gc;
  check_layer(c, gc);
  CHECK(gc.skipped == 0);
}

TEST_CASE("maxpool2d backward matches finite differences without ties",
          "[layers]") {
  struct geometry {
    int64_t pool, stride;
  };
  for (auto g : {geometry{2, 0}, geometry{3, 2}, geometry{2, 1}}) {
    DYNAMIC_SECTION("pool " << g.pool << " stride " << g.stride) {
      auto s = spec_of("maxpool2d");
      s.pool = g.pool;
      s.pool_stride = g.stride;
      auto c = make_case(s, {2, 5, 6}, 2, 5);
      // Distinct values 0.05 apart, shuffled: a perturbation of eps never
      // changes which element is a window's maximum.
      auto order = pick(c.x.size(), c.x.size(), 11);
      for (size_t i = 0; i < c.x.size(); ++i)
        c.x[i] = (static_cast<float>(order[i]) - 30.0f) * 0.05f;
      grad_checker gc;
      check_layer(c, gc, 60);
      CHECK(gc.skipped == 0);
    }
  }
}

TEST_CASE("flatten backward matches finite differences", "[layers]") {
  auto c = make_case(spec_of("flatten"), {2, 3, 2}, 2, 6);
  CHECK(c.l->aliases_input());
  CHECK(c.l->out_shape() == std::vector<int64_t>{12});
  grad_checker gc;
  check_layer(c, gc);
}

TEST_CASE("dropout backward matches finite differences", "[layers]") {
  auto s = spec_of("dropout");
  s.rate = 0.5;
  for (bool training : {true, false}) {
    DYNAMIC_SECTION("training " << training) {
      auto c = make_case(s, {20}, 3, 7);
      c.training = training;
      grad_checker gc;
      check_layer(c, gc, 60);
    }
  }
}

TEST_CASE("embedding backward matches finite differences with repeated ids",
          "[layers]") {
  auto s = spec_of("embedding");
  s.rows = 5;
  s.dim = 3;
  auto c = make_case(s, {4}, 3, 8);
  c.ids = {0, 2, 2, 4, 1, 2, 0, 0, 3, 2, 4, 4};
  CHECK(c.l->params()[0].sparse);
  CHECK(c.l->out_shape() == std::vector<int64_t>{4, 3});
  grad_checker gc;
  check_layer(c, gc, 100);
}

TEST_CASE("features gathers each sample's rows, then its floats",
          "[layers]") {
  auto s = spec_of("features");
  s.rows = 4;
  s.dim = 2;
  s.ids = 2;
  auto l = make_layer(0, s, {2 + 3});
  CHECK(l->out_shape() == std::vector<int64_t>{2 * 2 + 3});
  CHECK(l->params()[0].sparse);
  CHECK(l->params()[0].shape == std::vector<int64_t>{4, 2});
  // 2 samples: ids [n, 2], then floats [n, 3].
  std::vector<int32_t> x{3, 0, 1, 1, 0, 0, 0, 0, 0, 0};
  std::vector<float> floats{0.5f, 1.5f, 2.5f, -1, -2, -3};
  std::memcpy(x.data() + 4, floats.data(), sizeof(float) * 6);
  std::vector<float> table{0, 1, 10, 11, 20, 21, 30, 31};
  darray dx = to_device(x), t = to_device(table);
  darray y(cpu(), 2 * 7 * sizeof(float)), g(cpu(), 8 * sizeof(float));
  std::vector<param_ref> refs{{t.f32(), g.f32(), 8}};
  pass p{cpu(), 2, true, 1};
  l->forward(p, dx.get(), y.f32(), refs);
  CHECK(to_host(y, 14) == std::vector<float>{30, 31, 0, 1, 0.5f, 1.5f, 2.5f,
                                             10, 11, 10, 11, -1, -2, -3});
  std::vector<float> up(14);
  std::iota(up.begin(), up.end(), 1.0f);
  darray dy = to_device(up);
  l->backward(p, dx.get(), y.f32(), dy.f32(), nullptr, refs);
  // Row 0 from sample 0's second id, row 1 twice from sample 1, row 3
  // from sample 0's first; the floats' gradients go nowhere.
  CHECK(to_host(g, 8)
        == std::vector<float>{3, 4, 8 + 10, 9 + 11, 0, 0, 1, 2});
}

TEST_CASE("features backward matches finite differences with repeated ids",
          "[layers]") {
  auto s = spec_of("features");
  s.rows = 5;
  s.dim = 3;
  s.ids = 3;
  auto c = make_case(s, {3 + 2}, 3, 9);
  c.ids = {0, 2, 2, 4, 1, 2, 0, 0, 3};
  auto floats = uniform(6, 10, -1, 1);
  c.ids.resize(9 + 6);
  std::memcpy(c.ids.data() + 9, floats.data(), sizeof(float) * 6);
  grad_checker gc;
  check_layer(c, gc, 100);
}

TEST_CASE("features checks its spec", "[layers]") {
  auto s = spec_of("features");
  s.rows = 5;
  s.dim = 3;
  s.ids = 4;
  CHECK_THROWS_WITH(make_layer(0, s, {3}),
                    Contains("layer 0 (features): ids must be in [1, 3]"));
  s.ids = 2;
  CHECK_THROWS_WITH(make_layer(1, s, {3}),
                    Contains("must be the first layer"));
  s.rows = 0;
  CHECK_THROWS_WITH(make_layer(0, s, {3}), Contains("rows must be > 0"));
}

// --- losses ----------------------------------------------------------

TEST_CASE("softmax cross-entropy gradient matches finite differences",
          "[losses]") {
  const int m = 4, c = 5;
  auto logits = uniform(m * c, 21, -3, 3);
  std::vector<int32_t> labels{0, 4, 2, 2};
  darray z = to_device(logits), y = to_device(labels);
  darray loss(cpu(), m * sizeof(float)), dz(cpu(), m * c * sizeof(float));
  auto total = [&] {
    cpu().softmax_xent(z.f32(), y.i32(), m, c, loss.f32(), dz.f32(), 1.0f);
    auto l = to_host(loss, m);
    return std::accumulate(l.begin(), l.end(), 0.0);
  };
  total();
  auto analytic = to_host(dz, m * c);
  grad_checker gc;
  gc.eps = 1e-3f;
  for (size_t e = 0; e < logits.size(); ++e)
    gc.check(
      "logits", e, logits[e], analytic[e], [&] { upload(z, logits); }, total);
  gc.require_enough();

  // scale multiplies the gradient only.
  cpu().softmax_xent(z.f32(), y.i32(), m, c, loss.f32(), dz.f32(), 0.25f);
  auto scaled = to_host(dz, m * c);
  for (size_t e = 0; e < scaled.size(); ++e)
    CHECK(scaled[e] == Approx(0.25 * analytic[e]).margin(1e-7));
}

TEST_CASE("softmax cross-entropy is stable for huge logits", "[losses]") {
  std::vector<float> logits{1000, 0, -1000, 0, 1000, 1000};
  std::vector<int32_t> labels{0, 0};
  darray z = to_device(logits), y = to_device(labels);
  darray loss(cpu(), 2 * sizeof(float)), dz(cpu(), 6 * sizeof(float));
  cpu().softmax_xent(z.f32(), y.i32(), 2, 3, loss.f32(), dz.f32(), 1.0f);
  auto l = to_host(loss, 2);
  auto g = to_host(dz, 6);
  CHECK(l[0] == Approx(0).margin(1e-6));
  CHECK(l[1] == Approx(1000 + std::log(2.0)));
  CHECK(g[0] == Approx(0).margin(1e-6));
  CHECK(g[3] == Approx(-1));
  CHECK(g[4] == Approx(0.5));
}

TEST_CASE("sigmoid cross-entropy gradient matches finite differences",
          "[losses]") {
  const int m = 6;
  auto logits = uniform(m, 31, -4, 4);
  std::vector<float> labels{0, 1, 1, 0, 1, 0};
  darray z = to_device(logits), y = to_device(labels);
  darray loss(cpu(), m * sizeof(float)), dz(cpu(), m * sizeof(float));
  auto total = [&] {
    cpu().sigmoid_bce(z.f32(), y.f32(), m, loss.f32(), dz.f32(), 1.0f);
    auto l = to_host(loss, m);
    return std::accumulate(l.begin(), l.end(), 0.0);
  };
  total();
  auto analytic = to_host(dz, m);
  grad_checker gc;
  gc.eps = 1e-3f;
  for (size_t e = 0; e < logits.size(); ++e)
    gc.check(
      "logits", e, logits[e], analytic[e], [&] { upload(z, logits); }, total);
  gc.require_enough();
}

TEST_CASE("sigmoid cross-entropy is stable for huge logits", "[losses]") {
  std::vector<float> logits{100, 100, -100, -100};
  std::vector<float> labels{1, 0, 1, 0};
  darray z = to_device(logits), y = to_device(labels);
  darray loss(cpu(), 4 * sizeof(float)), dz(cpu(), 4 * sizeof(float));
  cpu().sigmoid_bce(z.f32(), y.f32(), 4, loss.f32(), dz.f32(), 1.0f);
  auto l = to_host(loss, 4);
  auto g = to_host(dz, 4);
  CHECK(l[0] == Approx(0).margin(1e-6));
  CHECK(l[1] == Approx(100));
  CHECK(l[2] == Approx(100));
  CHECK(l[3] == Approx(0).margin(1e-6));
  CHECK(g[0] == Approx(0).margin(1e-6));
  CHECK(g[1] == Approx(1));
  CHECK(g[2] == Approx(-1));
  CHECK(g[3] == Approx(0).margin(1e-6));
}

// --- primitives ------------------------------------------------------

TEST_CASE("dropout masks come from the seed and the index only", "[device]") {
  const size_t n = 100000;
  const float p = 0.3f;
  std::vector<float> ones(n, 1.0f);
  darray x = to_device(ones);
  darray mask(cpu(), n * sizeof(float)), y(cpu(), n * sizeof(float));
  cpu().dropout_forward(p, 42, x.f32(), mask.f32(), y.f32(), n);
  auto m1 = to_host(mask, n);
  auto y1 = to_host(y, n);
  size_t dropped = 0;
  for (size_t i = 0; i < n; ++i) {
    if (m1[i] == 0)
      ++dropped;
    else
      REQUIRE(m1[i] == 1.0f / (1.0f - p));
    REQUIRE(y1[i] == m1[i]);
  }
  CHECK(static_cast<double>(dropped) / n == Approx(p).margin(0.01));

  // The documented formula (gpu/device.hpp), which the CUDA device shares.
  for (uint64_t i : {0ULL, 1ULL, 777ULL, 99999ULL}) {
    double u =
      static_cast<double>(af::mix64(42 ^ af::mix64(i)) >> 11) * 0x1.0p-53;
    CHECK((m1[i] == 0) == (u < p));
  }

  // Same seed: same mask, even over a prefix. Another seed: another mask.
  cpu().dropout_forward(p, 42, x.f32(), mask.f32(), y.f32(), 1000);
  auto m2 = to_host(mask, 1000);
  CHECK(std::equal(m2.begin(), m2.end(), m1.begin()));
  cpu().dropout_forward(p, 43, x.f32(), mask.f32(), y.f32(), 1000);
  auto m3 = to_host(mask, 1000);
  CHECK_FALSE(std::equal(m3.begin(), m3.end(), m1.begin()));
}

TEST_CASE("gather and scatter_add handle repeated indices", "[device]") {
  const int d = 3;
  std::vector<float> table{0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32};
  std::vector<int32_t> idx{2, 0, 2, 3, 2};
  darray t = to_device(table), i = to_device(idx);
  darray out(cpu(), 5 * d * sizeof(float));
  cpu().gather_rows(t.f32(), i.i32(), out.f32(), 5, d);
  auto rows = to_host(out, 5 * d);
  for (int r = 0; r < 5; ++r)
    for (int j = 0; j < d; ++j)
      CHECK(rows[r * d + j] == table[idx[r] * d + j]);

  std::vector<float> dout(5 * d);
  std::iota(dout.begin(), dout.end(), 1.0f);
  darray g = to_device(std::vector<float>(12, 0.0f)), dd = to_device(dout);
  cpu().scatter_add_rows(dd.f32(), i.i32(), g.f32(), 5, d);
  auto grad = to_host(g, 12);
  std::vector<float> expected{4,          5,          6,          0,  0,  0,
                              1 + 7 + 13, 2 + 8 + 14, 3 + 9 + 15, 10, 11, 12};
  CHECK(grad == expected);
}

TEST_CASE("copy_columns copies a block of columns between strides",
          "[device]") {
  std::vector<float> src(4 * 5);
  std::iota(src.begin(), src.end(), 0.0f);
  darray s = to_device(src), d = to_device(std::vector<float>(4 * 6, -1));
  cpu().copy_columns(d.f32() + 2, 6, s.f32() + 1, 5, 4, 3);
  auto out = to_host(d, 24);
  for (int r = 0; r < 4; ++r)
    for (int j = 0; j < 6; ++j) {
      INFO(r << ", " << j);
      CHECK(out[r * 6 + j] == (j >= 2 && j < 5 ? src[r * 5 + j - 1] : -1));
    }
}

TEST_CASE("conv2d agrees with a direct convolution", "[device]") {
  // The CPU device merges samples with few output positions into one GEMM
  // in chunks: 37 samples of 9 positions go 13, 13, 11; 23 of 12 (strided,
  // padded) 8, 8, 7; 5 with a large im2col matrix (5400 taps) 2, 2, 1.
  for (auto g : {conv2d_shape{2, 3, 7, 6, 4, 3, 3, 1, 0},
                 conv2d_shape{2, 3, 7, 6, 4, 3, 3, 2, 1},
                 conv2d_shape{3, 2, 5, 5, 3, 1, 1, 1, 0},
                 conv2d_shape{2, 2, 6, 7, 2, 2, 3, 3, 2},
                 conv2d_shape{37, 2, 5, 5, 3, 3, 3, 1, 0},
                 conv2d_shape{23, 2, 6, 5, 3, 2, 3, 2, 1},
                 conv2d_shape{5, 600, 3, 3, 2, 3, 3, 1, 1}}) {
    DYNAMIC_SECTION("n " << g.n << " c " << g.c << " r " << g.r << " s " << g.s
                         << " stride " << g.stride << " pad " << g.pad) {
      int oh = g.out_h(), ow = g.out_w();
      size_t nx = static_cast<size_t>(g.n) * g.c * g.h * g.w;
      size_t nw = static_cast<size_t>(g.k) * g.c * g.r * g.s;
      size_t ny = static_cast<size_t>(g.n) * g.k * oh * ow;
      auto x = uniform(nx, 41, -1, 1), w = uniform(nw, 42, -1, 1),
           b = uniform(g.k, 43, -1, 1), dy = uniform(ny, 44, -1, 1);
      // Direct sums; x_at is 0 in the padding.
      auto x_at = [&](int n, int c, int iy, int ix) -> double {
        if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w)
          return 0;
        return x[((static_cast<size_t>(n) * g.c + c) * g.h + iy) * g.w + ix];
      };
      std::vector<double> y_ref(ny), dx_ref(nx, 0), dw_ref(nw, 0),
        db_ref(g.k, 0);
      for (int n = 0; n < g.n; ++n)
        for (int k = 0; k < g.k; ++k)
          for (int oy = 0; oy < oh; ++oy)
            for (int ox = 0; ox < ow; ++ox) {
              size_t yi =
                ((static_cast<size_t>(n) * g.k + k) * oh + oy) * ow + ox;
              double sum = b[k];
              db_ref[k] += dy[yi];
              for (int c = 0; c < g.c; ++c)
                for (int r = 0; r < g.r; ++r)
                  for (int s = 0; s < g.s; ++s) {
                    int iy = oy * g.stride - g.pad + r;
                    int ix = ox * g.stride - g.pad + s;
                    size_t wi =
                      ((static_cast<size_t>(k) * g.c + c) * g.r + r) * g.s + s;
                    sum += w[wi] * x_at(n, c, iy, ix);
                    dw_ref[wi] += dy[yi] * x_at(n, c, iy, ix);
                    if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w)
                      dx_ref[((static_cast<size_t>(n) * g.c + c) * g.h + iy)
                               * g.w
                             + ix] += dy[yi] * w[wi];
                  }
              y_ref[yi] = sum;
            }
      darray xd = to_device(x), wd = to_device(w), bd = to_device(b),
             dyd = to_device(dy);
      darray yd(cpu(), ny * 4), dxd(cpu(), nx * 4), dwd(cpu(), nw * 4),
        dbd(cpu(), g.k * 4);
      cpu().conv2d_forward(g, xd.f32(), wd.f32(), bd.f32(), yd.f32());
      cpu().conv2d_backward(g, xd.f32(), wd.f32(), dyd.f32(), dxd.f32(),
                            dwd.f32(), dbd.f32());
      auto compare = [](const std::vector<float>& got,
                        const std::vector<double>& want, const char* what) {
        REQUIRE(got.size() == want.size());
        for (size_t i = 0; i < got.size(); ++i) {
          INFO(what << "[" << i << "]");
          CHECK(got[i] == Approx(want[i]).margin(1e-4));
        }
      };
      compare(to_host(yd, ny), y_ref, "y");
      compare(to_host(dxd, nx), dx_ref, "dx");
      compare(to_host(dwd, nw), dw_ref, "dw");
      compare(to_host(dbd, g.k), db_ref, "db");
    }
  }
}

TEST_CASE("maxpool 2x2 agrees with a direct reference on odd sizes",
          "[device]") {
  // Odd height and width: the last row and column are in no window and get
  // a zero gradient. Few distinct values: many ties, which go to the first
  // maximum in row-major order.
  pool_shape s{2, 3, 5, 7, 2, 2};
  int oh = s.out_h(), ow = s.out_w();
  size_t nx = static_cast<size_t>(s.n) * s.c * s.h * s.w;
  size_t ny = static_cast<size_t>(s.n) * s.c * oh * ow;
  af::record_rng rng{7};
  std::vector<float> x(nx);
  for (auto& v : x)
    v = static_cast<float>(rng.below(3));
  auto dy = uniform(ny, 8, -1, 1);
  std::vector<float> y_ref(ny), dx_ref(nx, 0);
  for (size_t p = 0; p < static_cast<size_t>(s.n) * s.c; ++p)
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        size_t best = (p * s.h + 2 * oy) * s.w + 2 * ox;
        for (int r = 0; r < 2; ++r)
          for (int c = 0; c < 2; ++c) {
            size_t at = (p * s.h + 2 * oy + r) * s.w + 2 * ox + c;
            if (x[at] > x[best])
              best = at;
          }
        size_t yi = (p * oh + oy) * ow + ox;
        y_ref[yi] = x[best];
        dx_ref[best] += dy[yi];
      }
  darray xd = to_device(x), dyd = to_device(dy), yd(cpu(), ny * 4);
  // dx starts as garbage: every element must be written.
  darray dxd = to_device(std::vector<float>(nx, 99.0f));
  cpu().maxpool_forward(s, xd.f32(), yd.f32());
  cpu().maxpool_backward(s, xd.f32(), yd.f32(), dyd.f32(), dxd.f32());
  CHECK(to_host(yd, ny) == y_ref);
  CHECK(to_host(dxd, nx) == dx_ref);
}

TEST_CASE("maxpool sends the gradient to the first of tied maxima",
          "[device]") {
  pool_shape s{1, 1, 2, 4, 2, 2};
  std::vector<float> x{1, 1, 0, 3, 1, 1, 3, 3};
  darray xd = to_device(x), yd(cpu(), 2 * 4),
         dy = to_device(std::vector<float>{5, 7});
  darray dx(cpu(), 8 * 4);
  cpu().maxpool_forward(s, xd.f32(), yd.f32());
  CHECK(to_host(yd, 2) == std::vector<float>{1, 3});
  cpu().maxpool_backward(s, xd.f32(), yd.f32(), dy.f32(), dx.f32());
  CHECK(to_host(dx, 8) == std::vector<float>{5, 0, 0, 7, 0, 0, 0, 0});
}

// --- devices ---------------------------------------------------------

TEST_CASE("make_device knows cpu and cuda only", "[device]") {
  CHECK(make_device("cpu")->name() == "cpu");
  CHECK_FALSE(make_device("cpu")->is_cuda());
  for (const char* bad :
       {"tpu", "", "CPU", "cuda:", "cuda:x", "cuda:-1", "cuda:0x"})
    CHECK_THROWS_AS(make_device(bad), std::invalid_argument);
}

TEST_CASE("without CUDA make_device says why", "[device]") {
  std::string why;
  if (cuda_available(&why)) {
    SUCCEED("CUDA is available here");
    return;
  }
  std::cout << "cuda_available() is false: " << why << "\n";
  CHECK_FALSE(why.empty());
  CHECK_THROWS_AS(make_device("cuda"), std::runtime_error);
  CHECK_THROWS_AS(make_device("cuda:1"), std::runtime_error);
}

// --- specs -----------------------------------------------------------

namespace {

model_spec conv_net_spec() {
  model_spec m;
  m.input_shape = {1, 6, 6};
  auto conv = spec_of("conv2d");
  conv.filters = 3;
  conv.kernel = 3;
  conv.padding = 1;
  auto dense = spec_of("dense");
  dense.units = 4;
  m.layers = {conv, spec_of("relu"), spec_of("maxpool2d"), spec_of("flatten"),
              dense};
  m.loss = "softmax_cross_entropy";
  return m;
}

model_spec embedding_spec() {
  model_spec m;
  m.input_shape = {3};
  auto emb = spec_of("embedding");
  emb.rows = 1000;
  emb.dim = 4;
  auto drop = spec_of("dropout");
  drop.rate = 0.25;
  auto hidden = spec_of("dense");
  hidden.units = 5;
  auto out = spec_of("dense");
  out.units = 1;
  m.layers = {emb, drop, hidden, spec_of("relu"), out};
  m.loss = "sigmoid_binary_cross_entropy";
  return m;
}

} // namespace

TEST_CASE("param_specs names, shapes and limits", "[model]") {
  auto specs = param_specs(conv_net_spec());
  REQUIRE(specs.size() == 4);
  CHECK(specs[0].name == "0_conv2d/kernel");
  CHECK(specs[0].shape == std::vector<int64_t>{3, 1, 3, 3});
  CHECK(specs[0].init_limit == Approx(std::sqrt(6.0 / (9 + 27))));
  CHECK(specs[1].name == "0_conv2d/bias");
  CHECK(specs[1].init_limit == 0);
  CHECK(specs[2].name == "4_dense/kernel");
  CHECK(specs[2].shape == std::vector<int64_t>{27, 4});
  CHECK(specs[2].init_limit == Approx(std::sqrt(6.0 / 31)));
  CHECK(specs[3].name == "4_dense/bias");
  CHECK(specs[3].shape == std::vector<int64_t>{4});
  CHECK(output_width(conv_net_spec()) == 4);

  auto emb = param_specs(embedding_spec());
  CHECK(emb[0].name == "0_embedding/table");
  CHECK(emb[0].shape == std::vector<int64_t>{1000, 4});
  CHECK(emb[0].sparse);
  CHECK(emb[0].row_size() == 4);
  CHECK(emb[0].init_limit == 0.05f);
  CHECK(emb[1].name == "2_dense/kernel");
  CHECK(emb[1].shape == std::vector<int64_t>{12, 5});
  CHECK_FALSE(emb[1].sparse);
  CHECK(output_width(embedding_spec()) == 1);
}

TEST_CASE("spec errors name the layer", "[model]") {
  SECTION("unknown type lists the known ones") {
    auto m = conv_net_spec();
    m.layers[1].type = "frobnicate";
    auto e = spec_error(m);
    CHECK_THAT(e, Contains("layer 1 (frobnicate)"));
    CHECK_THAT(e, Contains("dense, relu, conv2d, maxpool2d"));
  }
  SECTION("dense without units") {
    auto m = conv_net_spec();
    m.layers[4].units = 0;
    CHECK_THAT(spec_error(m), Contains("layer 4 (dense)") && Contains("units"));
  }
  SECTION("conv2d on a flat input") {
    auto m = conv_net_spec();
    m.input_shape = {36};
    CHECK_THAT(spec_error(m), Contains("layer 0 (conv2d)")
                                && Contains("[channels, height, width]")
                                && Contains("[36]"));
  }
  SECTION("conv2d kernel larger than the input") {
    auto m = conv_net_spec();
    m.layers[0].kernel = 9;
    CHECK_THAT(spec_error(m),
               Contains("layer 0 (conv2d)") && Contains("does not fit"));
  }
  SECTION("maxpool2d window larger than the input") {
    auto m = conv_net_spec();
    m.layers[2].pool = 7;
    CHECK_THAT(spec_error(m), Contains("layer 2 (maxpool2d)"));
  }
  SECTION("maxpool2d after flatten") {
    auto m = conv_net_spec();
    std::swap(m.layers[2], m.layers[3]);
    CHECK_THAT(spec_error(m), Contains("layer 3 (maxpool2d)"));
  }
  SECTION("embedding not first") {
    auto m = embedding_spec();
    std::swap(m.layers[0], m.layers[1]);
    CHECK_THAT(spec_error(m),
               Contains("layer 1 (embedding)") && Contains("first"));
  }
  SECTION("dropout rate of 1") {
    auto m = embedding_spec();
    m.layers[1].rate = 1.0;
    CHECK_THAT(spec_error(m), Contains("layer 1 (dropout)"));
  }
  SECTION("sigmoid loss on a wide last layer") {
    auto m = conv_net_spec();
    m.loss = "sigmoid_binary_cross_entropy";
    CHECK_THAT(spec_error(m),
               Contains("layer 4 (dense)") && Contains("needs 1"));
  }
  SECTION("softmax loss on one output") {
    auto m = embedding_spec();
    m.loss = "softmax_cross_entropy";
    CHECK_THAT(spec_error(m),
               Contains("layer 4 (dense)") && Contains("at least 2"));
  }
  SECTION("no layers, unknown loss, bad input shape") {
    auto m = conv_net_spec();
    m.loss = "hinge";
    CHECK_THAT(spec_error(m), Contains("hinge"));
    m = conv_net_spec();
    m.layers.clear();
    CHECK_THAT(spec_error(m), Contains("no layers"));
    m = conv_net_spec();
    m.input_shape = {1, 0, 6};
    CHECK_THAT(spec_error(m), Contains("input_shape"));
  }
  SECTION("the model constructor checks too") {
    auto m = conv_net_spec();
    m.layers[4].units = -3;
    CHECK_THROWS_AS(model(m, cpu()), std::invalid_argument);
    CHECK_THROWS_AS(output_width(m), std::invalid_argument);
  }
}

// --- whole models ----------------------------------------------------

namespace {

/// Random values for every parameter of `m` (sparse ones with `rows` local
/// rows), uploaded; returns the host copies.
std::vector<std::vector<float>> randomise(model& m, int64_t rows,
                                          uint64_t seed) {
  std::vector<std::vector<float>> values;
  for (size_t j = 0; j < m.params().size(); ++j) {
    const auto& p = m.params()[j];
    int64_t size = p.size();
    if (p.sparse) {
      m.set_local_rows(j, rows);
      size = rows * p.row_size();
    }
    values.push_back(uniform(static_cast<size_t>(size), seed + j, -0.5, 0.5));
    upload(m.value(j), values.back());
  }
  return values;
}

void check_model(model& m, std::vector<std::vector<float>>& values,
                 const void* x, const void* labels, int n) {
  const uint64_t seed = 5;
  auto r = m.train_step(x, labels, n, seed);
  CHECK(std::isfinite(r.loss_sum));
  std::vector<std::vector<float>> analytic;
  for (size_t j = 0; j < values.size(); ++j)
    analytic.push_back(to_host(m.grad(j), values[j].size()));
  grad_checker gc;
  auto loss = [&] {
    return m.train_step(x, labels, n, seed).loss_sum;
  };
  for (size_t j = 0; j < values.size(); ++j)
    for (size_t e : pick(values[j].size(), 25, 100 + j))
      gc.check(
        m.params()[j].name, e, values[j][e], analytic[j][e],
        [&] { upload(m.value(j), values[j]); }, loss);
  gc.require_enough();
}

} // namespace

TEST_CASE("a conv net's train_step gradients match finite differences",
          "[model]") {
  model m(conv_net_spec(), cpu());
  auto values = randomise(m, 0, 50);
  const int n = 3;
  darray x = to_device(uniform(n * 36, 51, -1, 1));
  darray labels = to_device(std::vector<int32_t>{0, 3, 1});
  check_model(m, values, x.get(), labels.get(), n);
}

TEST_CASE("an embedding model's train_step gradients match finite "
          "differences",
          "[model]") {
  model m(embedding_spec(), cpu());
  // 6 local rows for ids seen in the batch, some more than once.
  auto values = randomise(m, 6, 60);
  const int n = 4;
  darray x =
    to_device(std::vector<int32_t>{0, 1, 2, 3, 3, 5, 4, 0, 1, 2, 2, 2});
  darray labels = to_device(std::vector<float>{1, 0, 0, 1});
  check_model(m, values, x.get(), labels.get(), n);
}

TEST_CASE("train_step overwrites gradients and reuses buffers across batch "
          "sizes",
          "[model]") {
  model m(conv_net_spec(), cpu());
  randomise(m, 0, 70);
  auto x = uniform(5 * 36, 71, -1, 1);
  std::vector<int32_t> labels{0, 1, 2, 3, 0};
  darray xd = to_device(x), yd = to_device(labels);

  auto first = m.train_step(xd.get(), yd.get(), 2, 1);
  auto g1 = to_host(m.grad(0), 27);
  m.train_step(xd.get(), yd.get(), 5, 1); // grows the buffers
  auto again = m.train_step(xd.get(), yd.get(), 2, 1);
  CHECK(to_host(m.grad(0), 27) == g1);
  CHECK(again.loss_sum == first.loss_sum);

  // evaluate: the same loss (no dropout here), logits, and correct counts
  // argmax == label.
  std::vector<float> logits;
  auto e = m.evaluate(xd.get(), yd.get(), 5, &logits);
  REQUIRE(logits.size() == 5 * 4);
  int64_t correct = 0;
  for (int i = 0; i < 5; ++i) {
    auto row = logits.begin() + i * 4;
    correct += std::max_element(row, row + 4) - row == labels[i];
  }
  CHECK(e.correct == correct);
  CHECK(e.loss_sum == Approx(m.train_step(xd.get(), yd.get(), 5, 1).loss_sum));
}

TEST_CASE("dropout is off in evaluate and seeded in train_step", "[model]") {
  model m(embedding_spec(), cpu());
  randomise(m, 6, 80);
  darray x = to_device(std::vector<int32_t>{0, 1, 2, 3, 4, 5});
  darray labels = to_device(std::vector<float>{1, 0});
  auto a = m.train_step(x.get(), labels.get(), 2, 1);
  auto b = m.train_step(x.get(), labels.get(), 2, 1);
  auto c = m.train_step(x.get(), labels.get(), 2, 2);
  CHECK(a.loss_sum == b.loss_sum);
  CHECK(a.loss_sum != c.loss_sum);
  std::vector<float> l1, l2;
  m.evaluate(x.get(), labels.get(), 2, &l1);
  m.evaluate(x.get(), labels.get(), 2, &l2);
  CHECK(l1 == l2);
  CHECK(l1.size() == 2);
}

TEST_CASE("plain SGD on a tiny MLP reduces the loss of a separable problem",
          "[model]") {
  model_spec spec;
  spec.input_shape = {2};
  auto hidden = spec_of("dense");
  hidden.units = 16;
  auto out = spec_of("dense");
  out.units = 2;
  spec.layers = {hidden, spec_of("relu"), out};
  spec.loss = "softmax_cross_entropy";
  model m(spec, cpu());
  std::vector<std::vector<float>> w;
  for (size_t j = 0; j < m.params().size(); ++j) {
    const auto& p = m.params()[j];
    w.emplace_back(static_cast<size_t>(p.size()));
    for (size_t e = 0; e < w[j].size(); ++e)
      w[j][e] = initial_value(p, 3, e);
    upload(m.value(j), w[j]);
  }

  // Class 1 above the line x0 + x1 = 0, with a margin.
  const int n = 64;
  af::record_rng rng{9};
  auto batch = [&](std::vector<float>& x, std::vector<int32_t>& y) {
    x.clear();
    y.clear();
    while (static_cast<int>(y.size()) < n) {
      float a = static_cast<float>(rng.uniform(-1, 1));
      float b = static_cast<float>(rng.uniform(-1, 1));
      if (std::abs(a + b) < 0.1f)
        continue;
      x.insert(x.end(), {a, b});
      y.push_back(a + b > 0 ? 1 : 0);
    }
  };
  std::vector<float> x;
  std::vector<int32_t> y;
  darray xd(cpu(), n * 2 * sizeof(float)), yd(cpu(), n * sizeof(int32_t));
  const float lr = 0.5f;
  double first = 0, last = 0;
  int64_t last_correct = 0;
  for (int step = 0; step < 150; ++step) {
    batch(x, y);
    upload(xd, x);
    upload(yd, y);
    auto r = m.train_step(xd.get(), yd.get(), n, 0);
    if (step == 0)
      first = r.loss_sum / n;
    last = r.loss_sum / n;
    last_correct = r.correct;
    for (size_t j = 0; j < w.size(); ++j) {
      auto g = to_host(m.grad(j), w[j].size());
      for (size_t e = 0; e < w[j].size(); ++e)
        w[j][e] -= lr * g[e] / n;
      upload(m.value(j), w[j]);
    }
  }
  INFO("mean loss " << first << " -> " << last << ", last batch correct "
                    << last_correct << "/" << n);
  CHECK(last < 0.3 * first);
  CHECK(last_correct >= 58);
}
