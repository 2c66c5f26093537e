// Models with named inputs (training.model.inputs, docs/training.md): the
// spec they make, the checks that name the field at fault, where each
// input's values land in the model's input, and a whole job with several
// tables, a shared one and numeric inputs learning a planted model.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "actorflow/actors/training/host_batch.hpp"
#include "actorflow/actors/training/training_spec.hpp"
#include "actorflow/runtime/core/random.hpp"
#include "actorflow/runtime/topology/topology.hpp"
#include "tests/support/harness.hpp"

using namespace af;
using namespace af::test;

namespace {

// Click logs from a planted logistic model over named fields: "a" and "c"
// (i64, ids in [0, 20)), "b" (i64 [n, 2], ids in [0, 30)), "x" (f32
// [n, 3]), "label" (i64) and "logit" (f32, the planted model's logit).
// Options: records, split (seed of the split), epochs.
class wide_source : public stage_logic {
public:
  wide_source(const stage_info& info, const topology::Stage& s)
    : records_(option(s, "records", 4000)), split_(option(s, "split", 0)),
      epochs_(option(s, "epochs", 1)), stride_(info.replicas),
      next_(info.replica) {}

  // The planted weights: of id `id` in field `f`, and of numeric column k.
  static double weight(uint64_t f, int64_t id) {
    record_rng rng{77, f, static_cast<uint64_t>(id)};
    return rng.uniform(-1.5, 1.5);
  }
  static double numeric_weight(int k) { return 0.8 * (k - 1); }

  bool produce(emitter& out) override {
    if (epoch_ >= epochs_)
      return false;
    std::vector<int64_t> a, b, c, y;
    std::vector<float> x, logit;
    for (int n = 0; n < 64 && next_ < records_; ++n, next_ += stride_) {
      record_rng rng{static_cast<uint64_t>(split_), 5,
                     static_cast<uint64_t>(next_)};
      a.push_back(static_cast<int64_t>(rng.below(20)));
      c.push_back(static_cast<int64_t>(rng.below(20)));
      b.push_back(static_cast<int64_t>(rng.below(30)));
      b.push_back(static_cast<int64_t>(rng.below(30)));
      double z = -0.3 + weight(0, a.back()) + weight(1, b[b.size() - 2])
                 + weight(2, b.back()) + weight(3, c.back());
      for (int k = 0; k < 3; ++k) {
        x.push_back(static_cast<float>(rng.uniform(-1, 1)));
        z += numeric_weight(k) * x.back();
      }
      logit.push_back(static_cast<float>(z));
      y.push_back(rng.uniform() < 1 / (1 + std::exp(-z)) ? 1 : 0);
    }
    auto n = static_cast<int64_t>(y.size());
    if (n > 0) {
      batch out_b;
      out_b.seq = seq_++;
      out_b.epoch = static_cast<uint64_t>(epoch_);
      out_b.set("a", from(a, {n}));
      out_b.set("b", from(b, {n, 2}));
      out_b.set("c", from(c, {n}));
      out_b.set("x", from(x, {n, 3}, dtype::f32));
      out_b.set("label", from(y, {n}));
      out_b.set("logit", from(logit, {n}, dtype::f32));
      out.push(std::move(out_b));
    }
    if (next_ >= records_) {
      out.end_epoch(static_cast<uint64_t>(epoch_));
      ++epoch_;
      next_ = next_ % stride_;
    }
    return epoch_ < epochs_;
  }

  template <class T>
  static tensor from(const std::vector<T>& v, std::vector<int64_t> shape,
                     dtype t = dtype::i64) {
    auto out = tensor::allocate(t, std::move(shape));
    std::memcpy(out.mutable_data(), v.data(), v.size() * sizeof(T));
    return out;
  }

private:
  int64_t records_, split_, epochs_, stride_, next_;
  int64_t epoch_ = 0;
  uint64_t seq_ = 0;
};

struct wide_fixture : fixture {
  wide_fixture() {
    stage_type t;
    t.name = "wide_source";
    t.kind = stage_kind::source;
    t.make = [](const stage_info& info, const topology::Stage& s) {
      return std::make_shared<wide_source>(info, s);
    };
    reg.add(std::move(t));
  }
};

// Tables "ta" (20 rows, shared by a and c) and "tb" (30 rows); x numeric.
const std::string wide_model = R"(
  model {
    table { name: "ta" rows: 20 }
    table { name: "tb" rows: 30 }
    inputs { field: "x" width: 3 }
    inputs { field: "a" table: "ta" }
    inputs { field: "b" table: "tb" width: 2 }
    inputs { field: "c" table: "ta" }
    embedding_dim: 4
    layer { type: "dense" units: 8 } layer { type: "relu" }
    layer { type: "dense" units: 1 }
    loss: "sigmoid_binary_cross_entropy" }
  optimizer { type: "adagrad" learning_rate: 0.1 }
  ps { shards: 3 staleness: 1 })";

std::string wide_job(const std::string& training) {
  return R"(
name: "wide"
runtime { seed: 11 metrics_interval_s: 0.05 }
training {
)" + training + R"(
}
stage { name: "src" type: "wide_source"
  options { key: "records" value: "16000" }
  options { key: "epochs" value: "4" } }
stage { name: "batch" type: "batcher" input { stage: "src" }
  batcher { batch_size: 128 } }
stage { name: "train" type: "trainer" replicas: 2
  input { stage: "batch" window: 2 } }
stage { name: "test" type: "wide_source"
  options { key: "records" value: "4000" }
  options { key: "split" value: "9" } }
stage { name: "test_batch" type: "batcher" input { stage: "test" }
  batcher { batch_size: 1000 } }
stage { name: "eval" type: "evaluator" input { stage: "test_batch" }
  evaluator { reference_score: "logit" } }
)";
}

topology::Topology parsed(const registry& reg, const std::string& text) {
  auto res = load_topology_text(text, "job.pbtxt", reg);
  std::string all;
  for (auto& e : res.errors)
    all += e.to_string() + "\n";
  INFO(all);
  REQUIRE(res.ok());
  return res.topology->spec;
}

std::string errors_of(const registry& reg, const std::string& training) {
  auto res = load_topology_text(wide_job(training), "job.pbtxt", reg);
  REQUIRE_FALSE(res.ok());
  std::string all;
  for (auto& e : res.errors)
    all += e.to_string() + "\n";
  return all;
}

} // namespace

TEST_CASE_METHOD(wide_fixture, "named inputs make one table of all tables, "
                               "categorical inputs first") {
  auto spec = training_spec_of(parsed(reg, wide_job(wide_model)));
  REQUIRE(spec.inputs.size() == 4);
  CHECK(spec.inputs[0].field == "a");
  CHECK(spec.inputs[0].offset == 0);
  CHECK(spec.inputs[1].field == "b");
  CHECK(spec.inputs[1].offset == 20);
  CHECK(spec.inputs[2].field == "c");
  CHECK(spec.inputs[2].offset == 0); // shares "ta" with a
  CHECK(spec.inputs[3].field == "x");
  CHECK_FALSE(spec.inputs[3].categorical());
  CHECK(spec.model.input_shape == std::vector<int64_t>{4 + 3});
  REQUIRE(spec.params.size() == 5);
  CHECK(spec.params[0].name == "0_features/table");
  CHECK(spec.params[0].sparse);
  CHECK(spec.params[0].shape == std::vector<int64_t>{50, 4});
  // The first dense layer takes 4 ids x 4 floats and the 3 numeric ones.
  CHECK(spec.params[1].shape == std::vector<int64_t>{4 * 4 + 3, 8});
}

TEST_CASE_METHOD(wide_fixture, "each input's values land where the features "
                               "layer reads them") {
  auto spec = training_spec_of(parsed(reg, wide_job(wide_model)));
  batch b;
  b.set("a", wide_source::from(std::vector<int64_t>{3, 7}, {2}));
  b.set("b", wide_source::from(std::vector<int64_t>{0, 29, 5, 0}, {2, 2}));
  b.set("c", wide_source::from(std::vector<int64_t>{7, 19}, {2}));
  b.set("x", wide_source::from(std::vector<double>{0.5, -1, 2, 3, 4, 5}, {2, 3},
                                dtype::f64));
  b.set("label", wide_source::from(std::vector<int64_t>{1, 0}, {2}));
  host_batch h;
  to_host(spec, b, h);
  REQUIRE(h.n == 2);
  REQUIRE(h.local.size() == 2 * 4 + 2 * 3);
  CHECK(h.ids == 2 * 4);
  // Each record's ids as table rows: a, b[0], b[1] (offset 20), c.
  std::vector<int64_t> want{3, 20 + 0, 20 + 29, 7, 7, 20 + 5, 20 + 0, 19};
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("id " << i);
    CHECK(h.rows[static_cast<size_t>(h.local[i])] == want[i]);
  }
  // Shared rows are deduplicated: a=7 of record 1 and c=7 of record 0.
  CHECK(h.local[3] == h.local[4]);
  CHECK(h.rows.size() == 6);
  // Then the floats, record by record.
  std::vector<float> x(6);
  std::memcpy(x.data(), h.local.data() + 8, sizeof(float) * 6);
  CHECK(x == std::vector<float>{0.5f, -1, 2, 3, 4, 5});
  CHECK(h.binary == std::vector<float>{1, 0});
}

TEST_CASE_METHOD(wide_fixture, "bad named-input data names the field") {
  auto spec = training_spec_of(parsed(reg, wide_job(wide_model)));
  auto make = [](std::vector<int64_t> a, std::vector<int64_t> c) {
    batch b;
    b.set("a", wide_source::from(a, {2}));
    b.set("b", wide_source::from(std::vector<int64_t>{0, 1, 2, 3}, {2, 2}));
    b.set("c", wide_source::from(c, {static_cast<int64_t>(c.size())}));
    b.set("x", wide_source::from(std::vector<float>(6), {2, 3}, dtype::f32));
    b.set("label", wide_source::from(std::vector<int64_t>{1, 0}, {2}));
    return b;
  };
  host_batch h;
  CHECK_THROWS_WITH(to_host(spec, make({3, 20}, {1, 1}), h),
                    Catch::Contains("field 'a' record 1 holds id 20, outside "
                                    "table 'ta''s rows [0, 20)"));
  CHECK_THROWS_WITH(to_host(spec, make({3, 2}, {1, 1, 1}), h),
                    Catch::Contains("field 'c' must hold 1 value(s) for each "
                                    "of 2 records"));
  auto no_x = make({3, 2}, {1, 1});
  no_x.fields.erase(no_x.fields.begin() + 3);
  CHECK_THROWS_WITH(to_host(spec, no_x, h),
                    Catch::Contains("the batch has no field 'x'"));
  auto float_ids = make({3, 2}, {1, 1});
  float_ids.set("a", wide_source::from(std::vector<float>{1, 2}, {2},
                                       dtype::f32));
  CHECK_THROWS_WITH(to_host(spec, float_ids, h),
                    Catch::Contains("field 'a' is f32; a categorical input "
                                    "takes integer ids"));
}

TEST_CASE_METHOD(wide_fixture, "named-input sections are checked with the "
                               "line of the problem") {
  auto with = [](const std::string& from, const std::string& to) {
    auto t = wide_model;
    auto at = t.find(from);
    REQUIRE(at != std::string::npos);
    t.replace(at, from.size(), to);
    return t;
  };
  CHECK_THAT(errors_of(reg, with("table: \"tb\" width: 2", "table: \"tc\"")),
             Catch::Contains("job.pbtxt:11: training.model.inputs 'b' names "
                             "table 'tc'"));
  auto no_rows = errors_of(reg, with("rows: 30", "rows: 0"));
  CHECK_THAT(no_rows, Catch::Contains("job.pbtxt:8: training.model.table "
                                      "'tb': rows must be > 0"));
  // Its inputs are not reported again as naming an undeclared table.
  CHECK_THAT(no_rows, !Catch::Contains("does not declare"));
  CHECK_THAT(errors_of(reg, with("field: \"c\"", "field: \"a\"")),
             Catch::Contains("each once, got \"a\""));
  CHECK_THAT(errors_of(reg, with("width: 3", "width: 0")),
             Catch::Contains("'x': width must be >= 1"));
  CHECK_THAT(errors_of(reg, with("embedding_dim: 4",
                                 "embedding_dim: 4 input: \"x\"")),
             Catch::Contains("has no input or input_shape"));
  CHECK_THAT(errors_of(reg, R"(
  model { inputs { field: "x" width: 3 } layer { type: "dense" units: 1 }
          loss: "sigmoid_binary_cross_entropy" })"),
             Catch::Contains("needs at least one categorical input"));
  CHECK_THAT(errors_of(reg, R"(
  model { input: "x" input_shape: [3] layer { type: "features" }
          layer { type: "dense" units: 1 }
          loss: "sigmoid_binary_cross_entropy" })"),
             Catch::Contains("layer 0 (features): not a layer to declare"));
  CHECK_THAT(errors_of(reg, with("table { name: \"tb\" rows: 30 }",
                                 "table { name: \"tb\" rows: 30 }\n"
                                 "    table { name: \"unused\" rows: 3 }")),
             Catch::Contains("job.pbtxt:9: training.model.table 'unused' "
                             "is used by no input"));
  CHECK_THAT(errors_of(reg, with("layer { type: \"dense\" units: 8 }",
                                 "layer { type: \"embedding\" rows: 3 dim: 2 "
                                 "}")),
             Catch::Contains("layer 0 (embedding): a model with named inputs"));
  // The user's layers are numbered as the topology lists them.
  CHECK_THAT(errors_of(reg, with("layer { type: \"relu\" }",
                                 "layer { type: \"dense\" units: 0 }")),
             Catch::Contains("job.pbtxt:14: training.model: layer 1 (dense)"));
}

TEST_CASE_METHOD(wide_fixture, "a model with several tables and numeric "
                               "inputs gets close to the planted AUC") {
  auto r = run_text(sys, reg, wide_job(wide_model));
  REQUIRE(r.ok);
  auto auc = metric_of(r, "eval[0]", "test_auc");
  auto best = metric_of(r, "eval[0]", "reference_auc");
  INFO("auc " << auc << ", planted " << best);
  CHECK(best > 0.75);
  CHECK(auc > best - 0.02);
  CHECK(auc <= best + 0.02);
}

TEST_CASE_METHOD(wide_fixture, "named inputs train with top-k pushes, "
                               "staleness-aware rates and 16-bit wire") {
  // The one sparse variable goes through the same PS paths as any other.
  auto training = wide_model;
  auto at = training.find("ps { shards: 3 staleness: 1 }");
  REQUIRE(at != std::string::npos);
  training.replace(at, 29,
                   "ps { shards: 3 staleness: 2 scale_lr_by_staleness: true "
                   "wire: \"bf16\" }");
  auto job = wide_job(training);
  at = job.find("input { stage: \"batch\" window: 2 } }");
  REQUIRE(at != std::string::npos);
  job.insert(at + 35, " trainer { topk_fraction: 0.5 }");
  INFO(job);
  auto r = run_text(sys, reg, job);
  REQUIRE(r.ok);
  auto auc = metric_of(r, "eval[0]", "test_auc");
  auto best = metric_of(r, "eval[0]", "reference_auc");
  INFO("auc " << auc << ", planted " << best);
  CHECK(auc > best - 0.03);
}
