// TorchScript models (actors/training/torchscript_model.hpp): what the engine reads
// from a module, the gradients and buffer changes a step pushes, the rows a
// categorical input looks up and the row gradients it pushes back, the
// errors that name the file and the field, and whole jobs that train a
// module against the shards. The modules come from make_modules.py (run by
// the fixture test torchscript.modules before these).
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "actorflow/actors/training/torchscript_model.hpp"
#include "actorflow/actors/training/training_spec.hpp"
#include "actorflow/gpu/device.hpp"
#include "actorflow/runtime/topology/topology.hpp"
#include "tests/support/harness.hpp"

using namespace af;
using namespace af::test;

namespace {

const std::string dir = AF_TORCHSCRIPT_DIR;

std::string file_of(const std::string& name) {
  return dir + "/" + name + ".pt";
}

std::string bytes_of(const std::string& name) {
  std::ifstream in{file_of(name), std::ios::binary};
  REQUIRE(in);
  return {std::istreambuf_iterator<char>{in}, std::istreambuf_iterator<char>{}};
}

// The values make_modules.py saw in the module it scripted.
std::vector<double> values_of(const std::string& module,
                              const std::string& var) {
  std::ifstream in{dir + "/values.json"};
  REQUIRE(in);
  auto j = nlohmann::json::parse(in);
  return j.at(module).at(var).get<std::vector<double>>();
}

tensor f32(std::vector<float> v, std::vector<int64_t> shape) {
  auto t = tensor::allocate(dtype::f32, std::move(shape));
  std::copy(v.begin(), v.end(), t.mutable_data_as<float>());
  return t;
}

tensor i64(std::vector<int64_t> v, std::vector<int64_t> shape) {
  auto t = tensor::allocate(dtype::i64, std::move(shape));
  std::copy(v.begin(), v.end(), t.mutable_data_as<int64_t>());
  return t;
}

// A topology with `model` as its training.model and a trainer.
std::string job_with(const std::string& model) {
  return R"(
name: "ts"
training {
  model { )" + model + R"( }
  optimizer { type: "sgd" learning_rate: 0.1 }
}
stage { name: "src" type: "synthetic_source" }
stage { name: "train" type: "trainer" input { stage: "src" } }
)";
}

std::string errors_of(const registry& reg, const std::string& text) {
  auto res = load_topology_text(text, "job.pbtxt", reg);
  std::string all;
  for (auto& e : res.errors)
    all += e.to_string() + "\n";
  return all;
}

training_spec spec_of(const registry& reg, const std::string& model) {
  auto res = load_topology_text(job_with(model), "job.pbtxt", reg);
  std::string all;
  for (auto& e : res.errors)
    all += e.to_string() + "\n";
  INFO(all);
  REQUIRE(res.ok());
  return training_spec_of(res.topology->spec);
}

std::vector<float> floats(gpu::darray& a, size_t n) {
  return {a.f32(), a.f32() + n};
}

} // namespace

TEST_CASE("a module's parameters, then its buffers, become variables with "
          "the file's values") {
  auto info = read_torchscript(bytes_of("norm"), "norm.pt", {"x"});
  REQUIRE(info.variables.size() == 6);
  std::vector<std::string> names;
  for (auto& v : info.variables)
    names.push_back(v.name);
  CHECK(names
        == std::vector<std::string>{"w", "bn.weight", "bn.bias",
                                    "bn.running_mean", "bn.running_var",
                                    "bn.num_batches_tracked"});
  CHECK_FALSE(info.variables[0].buffer);
  CHECK_FALSE(info.variables[1].buffer);
  CHECK(info.variables[3].buffer);
  CHECK(info.variables[5].buffer);
  CHECK(info.variables[5].shape.empty()); // a scalar count
  CHECK(info.args == std::vector<std::string>{"x"});
  auto lin = read_torchscript(bytes_of("linear"), "linear.pt", {"x", "y"});
  REQUIRE(lin.variables.size() == 2);
  CHECK(lin.variables[0].shape == std::vector<int64_t>{1, 3});
  auto want = values_of("linear", "fc.weight");
  for (uint64_t e = 0; e < 3; ++e)
    CHECK(gpu::initial_value(lin.variables[0], 99, e)
          == static_cast<float>(want[e]));
}

TEST_CASE("modules that cannot be trained are refused naming the file") {
  CHECK_THROWS_WITH(read_torchscript(bytes_of("not_torchscript"),
                                     "not_torchscript.pt", {"x"}),
                    Catch::Contains("'not_torchscript.pt' is not a "
                                    "TorchScript file"));
  CHECK_THROWS_WITH(read_torchscript(bytes_of("linear"), "linear.pt", {"x"}),
                    Catch::Contains("forward of 'linear.pt' takes (x, y), "
                                    "training.model.inputs lists (x)"));
  CHECK_THROWS_WITH(read_torchscript(bytes_of("linear"), "linear.pt",
                                     {"y", "x"}),
                    Catch::Contains("takes 'x' where training.model."
                                    "inputs[0] is field 'y'"));
  CHECK_THROWS_WITH(read_torchscript(bytes_of("double"), "double.pt", {"x"}),
                    Catch::Contains("parameter 'w' of 'double.pt' is Double"));
}

TEST_CASE_METHOD(fixture, "a TorchScript model is checked when the "
                          "topology is loaded, with the line at fault") {
  CHECK_THAT(errors_of(reg, job_with(R"(
    torchscript { file: "/nonexistent/m.pt" }
    inputs { field: "x" })")),
             Catch::Contains("job.pbtxt:5: training.model.torchscript.file: "
                             "cannot open '/nonexistent/m.pt'"));
  // A device or a FIFO would never end: only regular files are read.
  CHECK_THAT(errors_of(reg, job_with(R"(
    torchscript { file: "/dev/zero" }
    inputs { field: "x" })")),
             Catch::Contains("'/dev/zero' is not a regular file"));
  CHECK_THAT(errors_of(reg, job_with("torchscript { file: \"" + file_of("linear")
                                     + "\" } inputs { field: \"x\" }")),
             Catch::Contains("takes (x, y), training.model.inputs lists (x)"));
  CHECK_THAT(errors_of(reg, job_with("torchscript { file: \"" + file_of("linear")
                                     + "\" } inputs { field: \"x\" } inputs "
                                       "{ field: \"y\" } loss: \"x\"")),
             Catch::Contains("a TorchScript model has no input, input_shape, "
                             "layer or loss"));
  CHECK_THAT(errors_of(reg, job_with("torchscript { file: \"" + file_of("linear")
                                     + "\" } inputs { field: \"x\" width: 3 "
                                       "} inputs { field: \"y\" }")),
             Catch::Contains("'x': a TorchScript model takes the field's own "
                             "shape; leave width unset"));
  auto cuda = job_with("torchscript { file: \"" + file_of("linear")
                       + "\" } inputs { field: \"x\" } inputs { field: "
                         "\"y\" }");
  cuda.replace(cuda.find("input { stage: \"src\" } }"), 25,
               "input { stage: \"src\" } trainer { device: \"cuda\" } }");
  CHECK_THAT(errors_of(reg, cuda),
             Catch::Contains("device \"cuda\": this build runs TorchScript "
                             "models on the cpu only"));
  // The module's bytes travel inside the loaded topology (to the nodes).
  auto spec = spec_of(reg, "torchscript { file: \"" + file_of("linear")
                             + "\" } inputs { field: \"x\" } inputs { "
                               "field: \"y\" }");
  REQUIRE(spec.torchscript);
  CHECK(*spec.torchscript->module == bytes_of("linear"));
}

TEST_CASE_METHOD(fixture, "a step pushes the gradient of the batch's summed "
                          "loss") {
  auto spec = spec_of(reg, "torchscript { file: \"" + file_of("linear")
                             + "\" } inputs { field: \"x\" } inputs { "
                               "field: \"y\" }");
  auto dev = gpu::make_cpu_device();
  torchscript_model m{spec, *dev, true};
  // w = [1, 2, -1], b = 0.5, as a pull would set them.
  std::vector<float> w{1, 2, -1};
  std::copy(w.begin(), w.end(), m.value(0).f32());
  m.value(1).f32()[0] = 0.5f;
  std::vector<float> x{1, 0, 2, -1, 1, 1};
  std::vector<float> y{0, 3};
  batch b;
  b.set("x", f32(x, {2, 3}));
  b.set("y", f32(y, {2}));
  host_batch h;
  m.stage(b, h, false);
  CHECK(h.n == 2);
  auto r = m.train_step(h);
  // residuals: 1 + 0 - 2 + 0.5 - 0 = -0.5; -1 + 2 - 1 + 0.5 - 3 = -2.5
  std::vector<double> res{-0.5, -2.5};
  CHECK(r.loss_sum == Approx((0.25 + 6.25) / 2 * 2));
  // d(mean loss)/dw times n = sum_i 2 r_i x_i.
  auto g = floats(m.grad(0), 3);
  for (int k = 0; k < 3; ++k)
    CHECK(g[static_cast<size_t>(k)]
          == Approx(2 * (res[0] * x[static_cast<size_t>(k)]
                         + res[1] * x[static_cast<size_t>(3 + k)])));
  CHECK(m.grad(1).f32()[0] == Approx(2 * (res[0] + res[1])));
}

TEST_CASE_METHOD(fixture, "a step pushes the change it made to the batch "
                          "norm statistics") {
  auto spec = spec_of(reg, "torchscript { file: \"" + file_of("norm")
                             + "\" } inputs { field: \"x\" }");
  auto dev = gpu::make_cpu_device();
  torchscript_model m{spec, *dev, true};
  auto& params = m.params();
  REQUIRE(params.size() == 6);
  for (size_t i = 0; i < params.size(); ++i)
    for (int64_t e = 0; e < params[i].size(); ++e)
      m.value(i).f32()[e] = gpu::initial_value(params[i], 1,
                                               static_cast<uint64_t>(e));
  // As pulled: running mean [1, -1], running var [2, 2], 7 batches seen.
  m.value(3).f32()[0] = 1;
  m.value(3).f32()[1] = -1;
  m.value(4).f32()[0] = 2;
  m.value(4).f32()[1] = 2;
  m.value(5).f32()[0] = 7;
  batch b;
  b.set("x", f32({0, 4, 2, 8, 4, 12}, {3, 2})); // means 2 and 8
  host_batch h;
  m.stage(b, h, false);
  m.train_step(h);
  // momentum 0.25: change = 0.25 * (batch mean - running mean).
  CHECK(m.grad(3).f32()[0] == Approx(0.25 * (2 - 1)));
  CHECK(m.grad(3).f32()[1] == Approx(0.25 * (8 + 1)));
  // The unbiased batch variance (4 and 16) for the running one.
  CHECK(m.grad(4).f32()[0] == Approx(0.25 * (4 - 2)));
  CHECK(m.grad(4).f32()[1] == Approx(0.25 * (16 - 2)));
  CHECK(m.grad(5).f32()[0] == Approx(1)); // one more batch
}

TEST_CASE_METHOD(fixture, "a categorical input reaches forward as its rows "
                          "and pushes row gradients") {
  auto spec = spec_of(reg, "torchscript { file: \"" + file_of("embedded")
                             + "\" } table { name: \"t\" rows: 10 } "
                               "embedding_dim: 4 inputs { field: \"ids\" "
                               "table: \"t\" }");
  REQUIRE(spec.params.size() == 2);
  CHECK(spec.params[1].name == "tables");
  CHECK(spec.params[1].sparse);
  CHECK(spec.params[1].shape == std::vector<int64_t>{10, 4});
  auto dev = gpu::make_cpu_device();
  torchscript_model m{spec, *dev, true};
  std::vector<float> w{0.5f, -1, 2, 0.25f};
  std::copy(w.begin(), w.end(), m.value(0).f32());
  batch b;
  b.set("ids", i64({3, 7, 3, 9, 0, 3}, {3, 2}));
  host_batch h;
  m.stage(b, h, false);
  CHECK(h.rows == std::vector<int64_t>{0, 3, 7, 9});
  m.set_local_rows(1, 4);
  // Local row j (table row h.rows[j]) holds j + 1 in every element.
  for (int j = 0; j < 4; ++j)
    for (int e = 0; e < 4; ++e)
      m.value(1).f32()[j * 4 + e] = static_cast<float>(j + 1);
  auto r = m.train_step(h);
  // loss = mean over records of sum over ids of (row . w), row . w =
  // (j + 1) * sum(w) = (j + 1) * 1.75.
  double rows_sum = (2 + 3) + (2 + 4) + (1 + 2); // local rows + 1
  CHECK(r.loss_sum == Approx(rows_sum * 1.75));
  // Each row's gradient: w times how often it was looked up.
  std::vector<int> count{1, 3, 1, 1};
  for (int j = 0; j < 4; ++j)
    for (int e = 0; e < 4; ++e)
      CHECK(m.grad(1).f32()[j * 4 + e]
            == Approx(count[static_cast<size_t>(j)] * w[static_cast<size_t>(e)]));
  // And w's gradient: the summed rows looked up.
  CHECK(m.grad(0).f32()[0] == Approx(rows_sum));
  batch bad;
  bad.set("ids", i64({3, 10}, {1, 2}));
  CHECK_THROWS_WITH(m.stage(bad, h, false),
                    Catch::Contains("field 'ids' value 1 (of batch 0): id 10 "
                                    "is outside table 't' (rows 0..9)"));
}

TEST_CASE_METHOD(fixture, "bad batches and bad returns are errors that name "
                          "the file and the fields") {
  auto spec = spec_of(reg, "torchscript { file: \"" + file_of("linear")
                             + "\" } inputs { field: \"x\" } inputs { "
                               "field: \"y\" }");
  auto dev = gpu::make_cpu_device();
  torchscript_model m{spec, *dev, true};
  host_batch h;
  batch missing;
  missing.set("x", f32({1, 2, 3}, {1, 3}));
  CHECK_THROWS_WITH(m.stage(missing, h, false),
                    Catch::Contains("the batch has no field 'y' (it has: x)"));
  batch wide;
  wide.set("x", f32({1, 2, 3, 4}, {1, 4}));
  wide.set("y", f32({1}, {1}));
  m.stage(wide, h, false);
  CHECK_THROWS_WITH(m.train_step(h),
                    Catch::Contains("forward of '" + file_of("linear")
                                    + "' failed on (x f32 [1, 4], y f32 [1]): "
                                      "RuntimeError: mat1 and mat2 shapes "
                                      "cannot be multiplied"));
  auto vector_loss = spec_of(reg, "torchscript { file: \""
                                    + file_of("not_scalar")
                                    + "\" } inputs { field: \"x\" } inputs "
                                      "{ field: \"y\" }");
  torchscript_model v{vector_loss, *dev, true};
  batch two;
  two.set("x", f32({1, 2, 3, 4, 5, 6}, {2, 3}));
  two.set("y", f32({1, 2}, {2}));
  v.stage(two, h, false);
  CHECK_THROWS_WITH(v.train_step(h),
                    Catch::Contains("returned a loss of Float [2]; the loss "
                                    "must be a floating-point scalar"));
}

TEST_CASE_METHOD(fixture, "a variable that forward reshapes or replaces "
                          "is an error naming it and the file") {
  auto dev = gpu::make_cpu_device();
  host_batch h;
  batch b;
  b.set("x", f32({1, 2, 3, 4, 5, 6}, {2, 3}));
  b.set("y", f32({1, 2}, {2}));
  auto model = [&](const std::string& name) {
    return spec_of(reg, "torchscript { file: \"" + file_of(name)
                          + "\" } inputs { field: \"x\" } inputs { "
                            "field: \"y\" }");
  };
  auto grows_spec = model("grows");
  torchscript_model grows{grows_spec, *dev, true};
  grows.stage(b, h, false);
  CHECK_THROWS_WITH(grows.train_step(h),
                    Catch::Contains("variable 'seen' of '" + file_of("grows")
                                    + "' changed its shape from [4] to [2] "
                                      "in forward"));
  auto replaces_spec = model("replaces");
  torchscript_model replaces{replaces_spec, *dev, true};
  replaces.stage(b, h, false);
  CHECK_THROWS_WITH(replaces.train_step(h),
                    Catch::Contains("variable 'seen' of '"
                                    + file_of("replaces")
                                    + "' was replaced in forward"));
}

TEST_CASE_METHOD(fixture, "a NaN loss skips the step, or fails the job "
                          "naming the module") {
  auto job = [](const std::string& on_nonfinite) {
    return R"(
name: "nan"
training {
  model { torchscript { file: ")" + file_of("nan_loss") + R"(" }
          inputs { field: "logit" } inputs { field: "label" } }
  optimizer { type: "sgd" }
  on_nonfinite: ")" + on_nonfinite + R"("
}
stage { name: "src" type: "ctr_source"
  ctr_source { records: 64 records_per_item: 16 } }
stage { name: "train" type: "trainer" input { stage: "src" } }
)";
  };
  auto skipped = run_text(sys, reg, job("skip"));
  REQUIRE(skipped.ok);
  CHECK(metric_of(skipped, "train[0]", "skipped_steps") == 4);
  auto failed = run_text(sys, reg, job("fail"));
  CHECK_FALSE(failed.ok);
  CHECK_THAT(failed.error,
             Catch::Contains("loss of '" + file_of("nan_loss")
                             + "' (and so the gradient of variable "
                               "'fc.weight') has NaN or Inf at step 1"));
}

namespace {

// Clicks from a planted logistic model, the TorchScript "clicks" module over
// the engine's table, 2 trainers: `ps` and `trainer` are the blocks' bodies.
std::string clicks_job(const std::string& ps, const std::string& trainer) {
  return R"(
name: "clicks"
runtime { seed: 5 metrics_interval_s: 0.05 }
training {
  model {
    torchscript { file: ")" + file_of("clicks") + R"(" }
    table { name: "ids" rows: 400 }
    embedding_dim: 4
    inputs { field: "ids" table: "ids" }
    inputs { field: "label" }
  }
  optimizer { type: "adagrad" learning_rate: 0.5 }
  ps { )" + ps + R"( }
}
stage { name: "src" type: "ctr_source"
  ctr_source { records: 20000 features: 4 vocabulary: 100 epochs: 6
               records_per_item: 128 zipf: 0 } }
stage { name: "train" type: "trainer" replicas: 2
  input { stage: "src" window: 2 } trainer { )" + trainer + R"( } }
stage { name: "test" type: "ctr_source"
  ctr_source { records: 4000 features: 4 vocabulary: 100 split_seed: 9
               records_per_item: 1000 zipf: 0 } }
stage { name: "eval" type: "evaluator" input { stage: "test" }
  evaluator { reference_score: "logit" } }
)";
}

} // namespace

TEST_CASE_METHOD(fixture, "two trainers train a TorchScript model over the "
                          "engine's embedding table close to the planted "
                          "AUC") {
  auto r = run_text(sys, reg, clicks_job("shards: 2", "concurrent_steps: 1"));
  INFO(r.error);
  REQUIRE(r.ok);
  auto auc = metric_of(r, "eval[0]", "test_auc");
  auto best = metric_of(r, "eval[0]", "reference_auc");
  INFO("auc " << auc << ", planted " << best);
  CHECK(best > 0.7);
  CHECK(auc > best - 0.02);
}

TEST_CASE_METHOD(fixture, "a TorchScript model trains with top-k pushes, "
                          "staleness-aware rates and 16-bit wire") {
  auto r = run_text(sys, reg,
                    clicks_job("shards: 3 staleness: 2 scale_lr_by_staleness: "
                               "true wire: \"bf16\"",
                               "topk_fraction: 0.5"));
  INFO(r.error);
  REQUIRE(r.ok);
  auto auc = metric_of(r, "eval[0]", "test_auc");
  auto best = metric_of(r, "eval[0]", "reference_auc");
  INFO("auc " << auc << ", planted " << best);
  CHECK(auc > best - 0.03);
}
