// The optimizers against numbers worked out by hand from TensorFlow's v1
// update rules (the arithmetic is spelled out here, independently of
// gpu/optimizer.cpp).
#include <cmath>
#include <stdexcept>
#include <vector>

#include <catch2/catch.hpp>

#include "actorflow/gpu/optimizer.hpp"

using af::gpu::check;
using af::gpu::optimizer_config;
using af::gpu::optimizer_state;

namespace {

optimizer_config config_of(const char* type, double lr) {
  optimizer_config c;
  c.type = type;
  c.learning_rate = lr;
  return c;
}

// Float arithmetic against double references: a few ulps of the values.
Approx near(double x) {
  return Approx(x).epsilon(1e-5).margin(1e-6);
}

} // namespace

TEST_CASE("sgd subtracts lr times the gradient", "[optimizer]") {
  auto s = optimizer_state::dense(config_of("sgd", 0.1), 2);
  std::vector<float> w{1.0f, -2.0f};
  std::vector<float> g1{0.5f, 1.0f};
  std::vector<float> g2{-1.0f, 2.0f};
  s.apply(w.data(), g1.data(), 2, 0.1);
  CHECK(w[0] == near(1.0 - 0.1 * 0.5));
  CHECK(w[1] == near(-2.0 - 0.1 * 1.0));
  s.apply(w.data(), g2.data(), 2, 0.1);
  CHECK(w[0] == near(1.0 - 0.05 + 0.1));
  CHECK(w[1] == near(-2.1 - 0.2));
  CHECK(s.steps() == 2);
}

TEST_CASE("the learning rate passed to apply is the one used", "[optimizer]") {
  // The shard scales lr by staleness; the config's value is only a default.
  auto s = optimizer_state::dense(config_of("sgd", 0.1), 1);
  float w = 1.0f;
  float g = 1.0f;
  s.apply(&w, &g, 1, 0.025);
  CHECK(w == near(1.0 - 0.025));
}

TEST_CASE("momentum accumulates a velocity over three steps", "[optimizer]") {
  auto s = optimizer_state::dense(config_of("momentum", 0.1), 1);
  float w = 1.0f;
  float g[] = {1.0f, 0.5f, -1.0f};
  // v1 = 1; v2 = 0.9 * 1 + 0.5 = 1.4; v3 = 0.9 * 1.4 - 1 = 0.26.
  s.apply(&w, &g[0], 1, 0.1);
  CHECK(w == near(1.0 - 0.1 * 1.0));
  s.apply(&w, &g[1], 1, 0.1);
  CHECK(w == near(0.9 - 0.1 * 1.4));
  s.apply(&w, &g[2], 1, 0.1);
  CHECK(w == near(0.76 - 0.1 * 0.26));
}

TEST_CASE("nesterov momentum looks ahead by the new velocity", "[optimizer]") {
  auto cfg = config_of("momentum", 0.1);
  cfg.nesterov = true;
  auto s = optimizer_state::dense(cfg, 1);
  float w = 1.0f;
  float g[] = {1.0f, 0.5f, -1.0f};
  // w -= lr * (g + 0.9 * v) with v the updated velocity (1, 1.4, 0.26).
  s.apply(&w, &g[0], 1, 0.1);
  double w1 = 1.0 - 0.1 * (1.0 + 0.9 * 1.0);
  CHECK(w == near(w1));
  s.apply(&w, &g[1], 1, 0.1);
  double w2 = w1 - 0.1 * (0.5 + 0.9 * 1.4);
  CHECK(w == near(w2));
  s.apply(&w, &g[2], 1, 0.1);
  CHECK(w == near(w2 - 0.1 * (-1.0 + 0.9 * 0.26)));
}

TEST_CASE("adam corrects the bias of its moments by the step count",
          "[optimizer]") {
  auto cfg = config_of("adam", 0.1); // beta1 0.9, beta2 0.999, eps 1e-7
  auto s = optimizer_state::dense(cfg, 2);
  std::vector<float> w{1.0f, 0.0f};
  std::vector<float> g1{2.0f, 0.0f};
  std::vector<float> g2{-1.0f, 0.5f};
  s.apply(w.data(), g1.data(), 2, 0.1);
  // t = 1: m = 0.1 * 2 = 0.2, v = 0.001 * 4 = 0.004,
  // lr_t = 0.1 * sqrt(1 - 0.999) / (1 - 0.9).
  double lr1 = 0.1 * std::sqrt(0.001) / 0.1;
  double a1 = 1.0 - lr1 * 0.2 / (std::sqrt(0.004) + 1e-7);
  CHECK(w[0] == near(a1));
  CHECK(w[1] == near(0.0)); // g = 0, m = 0
  s.apply(w.data(), g2.data(), 2, 0.1);
  // t = 2: m = 0.9 * 0.2 + 0.1 * -1 = 0.08, v = 0.999 * 0.004 + 0.001 * 1,
  // lr_t = 0.1 * sqrt(1 - 0.999^2) / (1 - 0.9^2).
  double lr2 = 0.1 * std::sqrt(1.0 - 0.999 * 0.999) / (1.0 - 0.81);
  double a2 = a1 - lr2 * 0.08 / (std::sqrt(0.999 * 0.004 + 0.001) + 1e-7);
  CHECK(w[0] == near(a2));
  // Element 1 sees its first non-zero gradient at t = 2.
  double b2 = 0.0 - lr2 * 0.05 / (std::sqrt(0.001 * 0.25) + 1e-7);
  CHECK(w[1] == near(b2));
}

TEST_CASE("adagrad divides by the root of the summed squares", "[optimizer]") {
  auto cfg = config_of("adagrad", 0.1);
  cfg.epsilon = 1e-10;
  auto s = optimizer_state::dense(cfg, 1);
  float w = 1.0f;
  float g[] = {1.0f, 2.0f, -0.5f};
  // acc: 0.1 + 1 = 1.1, + 4 = 5.1, + 0.25 = 5.35.
  s.apply(&w, &g[0], 1, 0.1);
  double w1 = 1.0 - 0.1 * 1.0 / std::sqrt(1.1);
  CHECK(w == near(w1));
  s.apply(&w, &g[1], 1, 0.1);
  double w2 = w1 - 0.1 * 2.0 / std::sqrt(5.1);
  CHECK(w == near(w2));
  s.apply(&w, &g[2], 1, 0.1);
  CHECK(w == near(w2 + 0.1 * 0.5 / std::sqrt(5.35)));
}

TEST_CASE("sparse rows the gradient does not name stay untouched",
          "[optimizer]") {
  auto s = optimizer_state::rows(config_of("momentum", 0.1), 2);
  CHECK(s.add_rows(3) == 0);
  CHECK(s.row_count() == 3);
  std::vector<float> table{1, 1, 2, 2, 3, 3};
  size_t rows[] = {2, 0};
  std::vector<float> g{1, 2, 10, 20}; // row 2 gets (1, 2), row 0 (10, 20)
  s.apply_rows(table.data(), rows, g.data(), 2, 0.1);
  CHECK(table[0] == near(1.0 - 0.1 * 10));
  CHECK(table[1] == near(1.0 - 0.1 * 20));
  CHECK(table[2] == 2.0f);
  CHECK(table[3] == 2.0f);
  CHECK(table[4] == near(3.0 - 0.1 * 1));
  CHECK(table[5] == near(3.0 - 0.1 * 2));
  CHECK(s.steps(0) == 1);
  CHECK(s.steps(1) == 0);
  CHECK(s.steps(2) == 1);

  // Row 1's velocity did not decay: its first update is a first step.
  size_t one = 1;
  std::vector<float> g1{1, 1};
  s.apply_rows(table.data(), &one, g1.data(), 1, 0.1);
  CHECK(table[2] == near(2.0 - 0.1 * 1));
  // Row 0 continues from its velocity (10, 20): v = 0.9 * 10 + 1.
  size_t zero = 0;
  s.apply_rows(table.data(), &zero, g1.data(), 1, 0.1);
  CHECK(table[0] == near(1.0 - 1.0 - 0.1 * (0.9 * 10 + 1)));

  // Rows added later start fresh behind the existing ones.
  CHECK(s.add_rows(1) == 3);
  CHECK(s.steps(3) == 0);
  CHECK(s.size() == 8);
}

TEST_CASE("lazy adam keeps a step count per row", "[optimizer]") {
  auto s = optimizer_state::rows(config_of("adam", 0.1), 1);
  s.add_rows(2);
  std::vector<float> table{0, 0};
  size_t zero = 0;
  size_t one = 1;
  float g = 1.0f;
  s.apply_rows(table.data(), &zero, &g, 1, 0.1);
  s.apply_rows(table.data(), &zero, &g, 1, 0.1);
  s.apply_rows(table.data(), &one, &g, 1, 0.1);
  // Row 1 at its own t = 1: m = 0.1, v = 0.001, lr_t = 0.1 * sqrt(0.001)/0.1.
  double lr1 = 0.1 * std::sqrt(0.001) / 0.1;
  CHECK(table[1] == near(-lr1 * 0.1 / (std::sqrt(0.001) + 1e-7)));
  // Row 0 at t = 2 with g = 1 twice: m = 0.19, v = 0.001999.
  double lr2 = 0.1 * std::sqrt(1.0 - 0.999 * 0.999) / (1.0 - 0.81);
  double r0 = -lr1 * 0.1 / (std::sqrt(0.001) + 1e-7)
              - lr2 * 0.19 / (std::sqrt(0.001999) + 1e-7);
  CHECK(table[0] == near(r0));
  CHECK(s.steps(0) == 2);
  CHECK(s.steps(1) == 1);
}

TEST_CASE("apply_at changes only the named elements and their state",
          "[optimizer]") {
  auto s = optimizer_state::dense(config_of("momentum", 0.1), 4);
  std::vector<float> w{1, 2, 3, 4};
  uint64_t idx[] = {3, 1};
  float g[] = {1.0f, 2.0f};
  s.apply_at(w.data(), idx, g, 2, 0.1);
  CHECK(w[0] == 1.0f);
  CHECK(w[1] == near(2.0 - 0.1 * 2));
  CHECK(w[2] == 3.0f);
  CHECK(w[3] == near(4.0 - 0.1 * 1));
  // Element 3's velocity (1) is kept while element 1 is updated alone.
  uint64_t one = 1;
  float g1 = 0.0f;
  s.apply_at(w.data(), &one, &g1, 1, 0.1);
  CHECK(w[1] == near(1.8 - 0.1 * (0.9 * 2)));
  CHECK(w[3] == near(3.9));
  uint64_t three = 3;
  s.apply_at(w.data(), &three, &g1, 1, 0.1);
  CHECK(w[3] == near(3.9 - 0.1 * 0.9));
  // Element 0 has no velocity: a full update moves it by lr * g only.
  std::vector<float> gz{1, 0, 0, 0};
  s.apply(w.data(), gz.data(), 4, 0.1);
  CHECK(w[0] == near(1.0 - 0.1));
}

TEST_CASE("misuse throws and changes nothing", "[optimizer]") {
  auto s = optimizer_state::dense(config_of("sgd", 0.1), 2);
  std::vector<float> w{1, 2};
  std::vector<float> g{1, 1, 1};
  CHECK_THROWS_AS(s.apply(w.data(), g.data(), 3, 0.1), std::invalid_argument);
  uint64_t idx[] = {0, 2};
  CHECK_THROWS_AS(s.apply_at(w.data(), idx, g.data(), 2, 0.1),
                  std::invalid_argument);
  CHECK(w == std::vector<float>{1, 2});
  CHECK(s.steps() == 0);
  CHECK_THROWS_AS(s.add_rows(1), std::logic_error);

  auto t = optimizer_state::rows(config_of("sgd", 0.1), 2);
  size_t row = 0;
  CHECK_THROWS_AS(t.apply_rows(w.data(), &row, g.data(), 1, 0.1),
                  std::invalid_argument);
  CHECK_THROWS_AS(optimizer_state::rows(config_of("sgd", 0.1), 0),
                  std::invalid_argument);
  CHECK_THROWS_AS(optimizer_state::dense(config_of("adamw", 0.1), 1),
                  std::invalid_argument);
}

TEST_CASE("check names unknown optimizers and bad values", "[optimizer]") {
  for (auto type : {"sgd", "momentum", "adam", "adagrad"})
    CHECK(check(config_of(type, 0.01)).empty());
  CHECK(check(config_of("adamw", 0.01))
        == "unknown optimizer \"adamw\" (known: sgd, momentum, adam, "
           "adagrad)");
  CHECK(check(config_of("sgd", 0)) == "sgd: learning_rate must be > 0, got 0");
  CHECK(check(config_of("sgd", NAN)).find("learning_rate")
        != std::string::npos);

  auto m = config_of("momentum", 0.01);
  m.momentum = 1;
  CHECK(check(m) == "momentum: momentum must be in [0, 1), got 1");
  auto a = config_of("adam", 0.001);
  a.beta2 = 1;
  CHECK(check(a) == "adam: beta2 must be in [0, 1), got 1");
  a.beta2 = 0.999;
  a.epsilon = 0;
  CHECK(check(a) == "adam: epsilon must be > 0, got 0");
  auto g = config_of("adagrad", 0.01);
  g.epsilon = 0; // TF1's Adagrad has none
  CHECK(check(g).empty());
  g.initial_accumulator = 0;
  CHECK(check(g) == "adagrad: initial_accumulator must be > 0, got 0");
  // Fields another optimizer uses are not checked.
  auto s = config_of("sgd", 0.01);
  s.beta1 = 7;
  CHECK(check(s).empty());
}
