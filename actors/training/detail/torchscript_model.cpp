// A TorchScript module as the job's model, on libtorch (the CPU build
// Debian ships as libtorch-dev): a batch staged as its arguments, a
// training step, an evaluation. Compiled only when CMake found libtorch;
// the plugin's libtorch_model (actors/training/torchscript_plugin.hpp).
#include "actorflow/actors/training/torchscript_plugin.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include <ATen/Parallel.h>
#include <torch/csrc/jit/python/update_graph_executor_opt.h>

#include "actorflow/actors/training/detail/torchscript_libtorch.hpp"
#include "actorflow/gpu/cpu_threads.hpp"
#include "actorflow/runtime/stage/stage.hpp"

namespace af {

using namespace detail;

namespace {


c10::ScalarType scalar_type_of(dtype t, const std::string& field) {
  switch (t) {
    case dtype::u8:
      return torch::kByte;
    case dtype::i32:
      return torch::kInt;
    case dtype::i64:
      return torch::kLong;
    case dtype::f16:
      return torch::kHalf;
    case dtype::bf16:
      return torch::kBFloat16;
    case dtype::f32:
      return torch::kFloat;
    case dtype::f64:
      return torch::kDouble;
    case dtype::bytes:
      break;
  }
  throw input_error("field '" + field
                    + "' holds strings (bytes); a TorchScript model takes "
                      "numeric fields only (decode or parse it first)");
}

// An integer field's value i (i32 or i64; others are refused before).
int64_t int_at(const tensor& t, int64_t i) {
  return t.type() == dtype::i64 ? t.data_as<int64_t>()[i]
                                : t.data_as<int32_t>()[i];
}

// A batch as the module takes it.
struct staged_inputs {
  std::vector<tensor> fields; // by input: the batch's tensor
  // By input: the table row of each id (categorical inputs; else empty).
  std::vector<std::vector<int64_t>> rows;
};

// The module and the memory the parameter servers' values land in.
struct impl {
  impl(const training_spec& s, gpu::device& d, bool t)
    : spec(s), ts(*s.torchscript), dev(d), train(t),
      module(load_module(*ts.module, ts.file)) {
    if (dev.is_cuda())
      throw std::invalid_argument("TorchScript models run on the cpu device: "
                                  + device_note());
    params = spec.params;
    module.train(train);
    values.resize(params.size());
    grads.resize(params.size());
    before.resize(params.size());
    for (const auto& p : module.named_parameters(true))
      tensors.push_back(p.value);
    for (const auto& b : module.named_buffers(true))
      tensors.push_back(b.value);
    auto own = tensors.size(); // the rest: "tables"
    for (size_t i = 0; i < params.size(); ++i) {
      auto& p = params[i];
      if (p.sparse) {
        sparse = static_cast<int>(i);
        continue;
      }
      if (i >= own || shape_of(tensors[i]) != p.shape)
        throw std::invalid_argument("'" + ts.file
                                    + "' does not hold the variables the "
                                      "job's model has (variable '"
                                    + p.name + "')");
      auto bytes = static_cast<size_t>(p.size()) * sizeof(float);
      values[i] = gpu::darray(dev, std::max<size_t>(bytes, sizeof(float)));
      grads[i] = gpu::darray(dev, std::max<size_t>(bytes, sizeof(float)));
      std::memcpy(values[i].get(), p.initial->data(), bytes);
      // Float32 tensors live in the pulled memory itself; others (e.g.
      // batch norm's int64 count) are converted at each step.
      auto& t = tensors[i];
      if (t.scalar_type() == torch::kFloat && t.is_contiguous()) {
        torch::NoGradGuard no_grad;
        t.set_data(torch::from_blob(values[i].f32(), t.sizes(),
                                    torch::kFloat));
        aliased.push_back(true);
      } else {
        aliased.push_back(false);
      }
    }
  }

  // The module's tensor i holds variable i's pulled values.
  void take_values() {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < aliased.size(); ++i) {
      if (aliased[i]) {
        if (params[i].buffer && train) {
          auto n = static_cast<size_t>(params[i].size());
          before[i].assign(values[i].f32(), values[i].f32() + n);
        }
        continue;
      }
      auto src = torch::from_blob(values[i].f32(), tensors[i].sizes(),
                                  torch::kFloat);
      tensors[i].copy_(tensors[i].is_floating_point() ? src : src.round());
      if (params[i].buffer && train) {
        auto n = static_cast<size_t>(params[i].size());
        before[i].assign(values[i].f32(), values[i].f32() + n);
      }
    }
  }

  // A variable that forward reshaped or replaced (a buffer assigned anew:
  // `self.b = ...`) can no longer be pulled into or pushed from. The
  // module's tensors are read again: tensors holds the ones it had.
  void check_variables() const {
    size_t i = 0;
    auto check = [&](const torch::Tensor& now) {
      if (i >= aliased.size())
        return;
      const auto& p = params[i];
      if (shape_of(now) != p.shape)
        throw input_error("variable '" + p.name + "' of '" + ts.file
                          + "' changed its shape from " + shape_text(p.shape)
                          + " to " + shape_text(shape_of(now))
                          + " in forward; the parameter servers hold it "
                            "with the shape it was saved with");
      if (!now.is_same(tensors[i])
          || (aliased[i] && now.data_ptr() != values[i].get()))
        throw input_error("variable '" + p.name + "' of '" + ts.file
                          + "' was replaced in forward (assign into it "
                            "in place instead, e.g. with copy_)");
      ++i;
    };
    for (const auto& p : module.named_parameters(true))
      check(p.value);
    for (const auto& b : module.named_buffers(true))
      check(b.value);
  }

  // The module's arguments: numeric fields as they are; categorical ones
  // as the rows of `table` (the local table, `rows` in order) they look up.
  std::vector<c10::IValue> arguments(const staged_inputs& st,
                                     const std::vector<int64_t>& rows,
                                     const torch::Tensor& table) const {
    std::vector<c10::IValue> args;
    for (size_t k = 0; k < ts.inputs.size(); ++k) {
      auto& f = st.fields[k];
      auto& in = ts.inputs[k];
      if (!in.categorical()) {
        auto t = torch::from_blob(const_cast<std::byte*>(f.data()), f.shape(),
                                  scalar_type_of(f.type(), in.field));
        // A copy: the module may write into its inputs, and the batch's
        // memory may be a cache's that later epochs read again.
        args.emplace_back(t.clone());
        continue;
      }
      auto& global = st.rows[k];
      auto idx = torch::empty({static_cast<int64_t>(global.size())},
                              torch::kLong);
      auto* p = idx.data_ptr<int64_t>();
      for (size_t j = 0; j < global.size(); ++j)
        p[j] = std::lower_bound(rows.begin(), rows.end(), global[j])
               - rows.begin();
      auto shape = f.shape();
      shape.push_back(ts.embedding_dim);
      args.emplace_back(table.index_select(0, idx).view(shape));
    }
    return args;
  }

  std::string describe(const staged_inputs& st) const {
    std::string s;
    for (size_t k = 0; k < ts.inputs.size(); ++k) {
      auto& f = st.fields[k];
      s += (s.empty() ? "" : ", ") + ts.inputs[k].field + " "
           + dtype_name(f.type()) + " " + shape_text(f.shape());
      if (ts.inputs[k].categorical())
        s += " -> f32 " + shape_text(f.shape()) + "+["
             + std::to_string(ts.embedding_dim) + "]";
    }
    return s;
  }

  // forward, and its loss and predictions.
  struct output {
    torch::Tensor loss, predictions;
  };
  output forward(const staged_inputs& st, std::vector<c10::IValue> args) {
    c10::IValue out;
    try {
      out = module.forward(std::move(args));
    } catch (const c10::Error& e) {
      throw input_error("forward of '" + ts.file + "' failed on ("
                        + describe(st) + "): " + first_line(e));
    } catch (const std::exception& e) { // the interpreter's own errors
      throw input_error("forward of '" + ts.file + "' failed on ("
                        + describe(st) + "): " + gist(e.what()));
    }
    output r;
    if (out.isTensor()) {
      r.loss = out.toTensor();
    } else if (out.isTuple() && !out.toTupleRef().elements().empty()
               && out.toTupleRef().elements()[0].isTensor()) {
      auto& e = out.toTupleRef().elements();
      r.loss = e[0].toTensor();
      if (e.size() > 1 && e[1].isTensor())
        r.predictions = e[1].toTensor();
    } else {
      throw input_error("forward of '" + ts.file + "' returned "
                        + out.tagKind()
                        + "; it must return the batch's mean loss (a "
                          "scalar tensor) or a tuple (loss, predictions)");
    }
    if (r.loss.numel() != 1 || !r.loss.is_floating_point())
      throw input_error("forward of '" + ts.file + "' returned a loss of "
                        + std::string(c10::toString(r.loss.scalar_type()))
                        + " " + shape_text(shape_of(r.loss))
                        + "; the loss must be a floating-point scalar (the "
                          "batch's mean loss)");
    return r;
  }

  // This trainer's or evaluator's share of the cores for libtorch's
  // threads (OpenMP's count is the calling thread's own), and the graph
  // executor without its optimization passes: the module then runs its
  // operators as PyTorch's eager mode does. With them, libtorch 1.13's
  // profiling executor took 17% longer per training step of
  // fmnist_resnet.py's model (60.4 against 51.6 ms, one thread, in
  // Python; eager PyTorch 49.8 ms).
  static void prepare_thread(int n) {
    if (at::get_num_threads() != n)
      at::set_num_threads(n);
    if (torch::jit::getGraphExecutorOptimize())
      torch::jit::setGraphExecutorOptimize(false);
  }

  training_spec spec;
  torchscript_spec ts;
  gpu::device& dev;
  bool train;
  std::vector<gpu::param_spec> params;
  // Declared before the module: its tensors point into them.
  std::vector<gpu::darray> values, grads;
  std::vector<std::vector<float>> before; // buffers before the step
  torch::jit::Module module;
  std::vector<torch::Tensor> tensors; // the module's, by variable
  std::vector<bool> aliased;          // tensor i lives in values[i]
  int sparse = -1;                    // the "tables" variable
};

} // namespace

namespace detail {

// torchscript_model's work on libtorch.
class libtorch_model final : public model_impl {
public:
  libtorch_model(const training_spec& spec, gpu::device& dev, bool train);
  ~libtorch_model() override;
  libtorch_model(const libtorch_model&) = delete;
  libtorch_model& operator=(const libtorch_model&) = delete;

  const std::vector<gpu::param_spec>& params() const noexcept override;
  gpu::device& dev() noexcept override;
  gpu::darray& value(size_t i) override;
  gpu::darray& grad(size_t i) override;
  void set_local_rows(size_t i, int64_t rows) override;
  void stage(const batch& b, host_batch& out, bool labels,
             const std::string& reference) const override;
  gpu::model::step_result train_step(const host_batch& h) override;
  gpu::model::step_result evaluate(const host_batch& h,
                                   const std::vector<int64_t>& rows,
                                   std::vector<float>& scores,
                                   int64_t& classes) override;

private:
  std::unique_ptr<impl> impl_;
};

std::unique_ptr<model_impl> open_model(const training_spec& spec,
                                       gpu::device& dev, bool train) {
  return std::make_unique<libtorch_model>(spec, dev, train);
}

libtorch_model::libtorch_model(const training_spec& spec, gpu::device& dev,
                               bool train)
  : impl_(std::make_unique<impl>(spec, dev, train)) {
}

libtorch_model::~libtorch_model() {
  // The module's tensors point into the values: it goes first.
  if (impl_)
    impl_->tensors.clear();
}

const std::vector<gpu::param_spec>& libtorch_model::params() const noexcept {
  return impl_->params;
}

gpu::device& libtorch_model::dev() noexcept {
  return impl_->dev;
}

gpu::darray& libtorch_model::value(size_t i) {
  return impl_->values.at(i);
}

gpu::darray& libtorch_model::grad(size_t i) {
  return impl_->grads.at(i);
}

void libtorch_model::set_local_rows(size_t i, int64_t rows) {
  auto& m = *impl_;
  const auto& p = m.params.at(i);
  if (!p.sparse)
    throw std::invalid_argument("set_local_rows: variable " + p.name
                                + " is not sparse");
  auto bytes = static_cast<size_t>(std::max<int64_t>(rows, 1) * p.row_size())
               * sizeof(float);
  m.values[i].reserve(m.dev, bytes);
  m.grads[i].reserve(m.dev, bytes);
}

void libtorch_model::stage(const batch& b, host_batch& out, bool labels,
                              const std::string& reference) const {
  auto& ts = impl_->ts;
  auto st = std::make_shared<staged_inputs>();
  int64_t n = -1;
  std::vector<int64_t> all;
  for (auto& in : ts.inputs) {
    auto& f = b.field(in.field);
    if (f.shape().empty())
      throw input_error("field '" + in.field
                        + "' is a scalar; a batch field has a first "
                          "dimension of records");
    if (n < 0)
      n = f.rows();
    else if (f.rows() != n)
      throw input_error("field '" + in.field + "' has " + std::to_string(f.rows())
                        + " records, field '" + ts.inputs.front().field
                        + "' has " + std::to_string(n));
    scalar_type_of(f.type(), in.field); // refuses strings
    std::vector<int64_t> rows;
    if (in.categorical()) {
      if (f.type() != dtype::i64 && f.type() != dtype::i32)
        throw input_error("field '" + in.field + "' feeds table '" + in.table
                          + "' and must hold integer ids (i64 or i32), got "
                          + dtype_name(f.type()));
      auto count = f.elements();
      rows.resize(static_cast<size_t>(count));
      for (int64_t j = 0; j < count; ++j) {
        auto id = int_at(f, j);
        if (id < 0 || id >= in.rows)
          throw input_error("field '" + in.field + "' value "
                            + std::to_string(j) + " (of batch "
                            + std::to_string(b.seq) + "): id "
                            + std::to_string(id) + " is outside table '"
                            + in.table + "' (rows 0.."
                            + std::to_string(in.rows - 1) + ")");
        rows[static_cast<size_t>(j)] = in.offset + id;
      }
      all.insert(all.end(), rows.begin(), rows.end());
    }
    st->fields.push_back(f);
    st->rows.push_back(std::move(rows));
  }
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  out.n = static_cast<int>(n);
  out.epoch = b.epoch;
  out.rows = std::move(all);
  out.classes.clear();
  out.binary.clear();
  if (labels) {
    auto& l = b.field(impl_->spec.label);
    if (l.rows() != n || l.elements() != n)
      throw input_error("label field '" + impl_->spec.label + "' has "
                        + std::to_string(l.elements()) + " values for "
                        + std::to_string(n) + " records");
    for (int64_t i = 0; i < n; ++i) {
      double v = 0;
      switch (l.type()) {
        case dtype::i64:
        case dtype::i32:
          v = static_cast<double>(int_at(l, i));
          break;
        case dtype::f32:
          v = l.data_as<float>()[i];
          break;
        case dtype::f64:
          v = l.data_as<double>()[i];
          break;
        default:
          throw input_error("label field '" + impl_->spec.label
                            + "' must be i64, i32, f32 or f64, got "
                            + dtype_name(l.type()));
      }
      out.classes.push_back(static_cast<int32_t>(v));
      out.binary.push_back(static_cast<float>(v));
    }
  }
  out.reference.clear();
  if (!reference.empty()) {
    auto& r = b.field(reference);
    if (r.type() != dtype::f32 || r.elements() != n)
      throw input_error("reference field '" + reference
                        + "' must be f32 with one value per record");
    out.reference.assign(r.data_as<float>(), r.data_as<float>() + n);
  }
  out.staged = std::move(st);
}

gpu::model::step_result libtorch_model::train_step(const host_batch& h) {
  auto& m = *impl_;
  impl::prepare_thread(gpu::blas_threads());
  auto& st = *static_cast<const staged_inputs*>(h.staged.get());
  m.take_values();
  torch::Tensor table;
  if (m.sparse >= 0) {
    auto rows = std::max<int64_t>(static_cast<int64_t>(h.rows.size()), 1);
    table = torch::from_blob(m.values[static_cast<size_t>(m.sparse)].f32(),
                             {rows, m.ts.embedding_dim}, torch::kFloat)
              .requires_grad_(true);
  }
  for (auto& t : m.tensors)
    if (t.requires_grad())
      t.mutable_grad() = torch::Tensor();
  auto out = m.forward(st, m.arguments(st, h.rows, table));
  if (!out.loss.requires_grad())
    throw input_error("the loss that forward of '" + m.ts.file
                      + "' returned depends on no parameter (nothing to "
                        "train)");
  try {
    out.loss.backward();
  } catch (const c10::Error& e) {
    throw input_error("backward of '" + m.ts.file + "' failed: "
                      + first_line(e));
  }
  m.check_variables();
  auto n = static_cast<float>(h.n);
  for (size_t i = 0; i < m.aliased.size(); ++i) {
    auto count = static_cast<size_t>(m.params[i].size());
    auto* g = m.grads[i].f32();
    if (m.params[i].buffer) {
      // The change this step made (forward in training mode updates the
      // running statistics in place).
      auto now = m.aliased[i]
                   ? torch::from_blob(m.values[i].f32(),
                                      {static_cast<int64_t>(count)},
                                      torch::kFloat)
                   : m.tensors[i].detach().to(torch::kFloat).contiguous()
                       .reshape(-1);
      auto* x = now.data_ptr<float>();
      for (size_t e = 0; e < count; ++e)
        g[e] = x[e] - m.before[i][e];
      continue;
    }
    auto grad = m.tensors[i].grad();
    if (!grad.defined()) {
      std::fill(g, g + count, 0.0f);
      continue;
    }
    auto c = grad.contiguous();
    auto* x = c.data_ptr<float>();
    for (size_t e = 0; e < count; ++e)
      g[e] = x[e] * n;
  }
  if (m.sparse >= 0) {
    auto i = static_cast<size_t>(m.sparse);
    auto count = h.rows.size() * static_cast<size_t>(m.ts.embedding_dim);
    auto* g = m.grads[i].f32();
    auto grad = table.grad();
    if (!grad.defined()) {
      std::fill(g, g + count, 0.0f);
    } else {
      auto c = grad.contiguous();
      auto* x = c.data_ptr<float>();
      for (size_t e = 0; e < count; ++e)
        g[e] = x[e] * n;
    }
  }
  gpu::model::step_result r;
  r.loss_sum = out.loss.item<double>() * h.n;
  return r;
}

gpu::model::step_result
libtorch_model::evaluate(const host_batch& h,
                            const std::vector<int64_t>& rows,
                            std::vector<float>& scores, int64_t& classes) {
  auto& m = *impl_;
  impl::prepare_thread(1);
  torch::NoGradGuard no_grad;
  auto& st = *static_cast<const staged_inputs*>(h.staged.get());
  m.take_values();
  torch::Tensor table;
  if (m.sparse >= 0) {
    auto n = std::max<int64_t>(static_cast<int64_t>(rows.size()), 1);
    table = torch::from_blob(m.values[static_cast<size_t>(m.sparse)].f32(),
                             {n, m.ts.embedding_dim}, torch::kFloat);
  }
  auto out = m.forward(st, m.arguments(st, rows, table));
  gpu::model::step_result r;
  r.loss_sum = out.loss.item<double>() * h.n;
  classes = 0;
  auto& p = out.predictions;
  if (!p.defined())
    return r;
  if (p.dim() == 2 && p.size(0) == h.n && p.size(1) > 1) {
    classes = p.size(1);
    auto best = p.argmax(1).to(torch::kLong).contiguous();
    auto* b = best.data_ptr<int64_t>();
    for (int i = 0; i < h.n && static_cast<size_t>(i) < h.classes.size(); ++i)
      r.correct += b[i] == h.classes[static_cast<size_t>(i)] ? 1 : 0;
    auto all = p.detach().to(torch::kFloat).reshape(-1).contiguous();
    scores.insert(scores.end(), all.data_ptr<float>(),
                  all.data_ptr<float>() + all.numel());
    return r;
  }
  if (p.numel() != h.n)
    throw input_error("forward of '" + m.ts.file + "' returned predictions "
                      + shape_text(shape_of(p)) + " for "
                      + std::to_string(h.n)
                      + " records; they must be [n, classes] scores or [n] "
                        "(or [n, 1]) scores of the positive class");
  classes = 1;
  auto s = p.detach().to(torch::kFloat).reshape(-1).contiguous();
  auto* x = s.data_ptr<float>();
  for (int i = 0; i < h.n; ++i) {
    scores.push_back(x[i]);
    bool positive = x[i] > 0.5f;
    if (static_cast<size_t>(i) < h.binary.size())
      r.correct += positive == (h.binary[static_cast<size_t>(i)] > 0.5f);
  }
  return r;
}

} // namespace detail

} // namespace af
