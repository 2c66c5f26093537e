// The training section of a topology (Topology.training), as the trainer,
// the evaluator and the parameter-server shards read it: the model, the
// optimizer with its defaults filled in. Declared in
// actors/training/training_spec.hpp.
#include "actorflow/actors/training/training_spec.hpp"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sys/stat.h>
#include <map>
#include <set>
#include <stdexcept>

#include "actorflow/actors/training/torchscript_model.hpp"
#include "actorflow/runtime/core/wire_dtype.hpp"
#include "actorflow/runtime/topology/topology.hpp"

namespace af {

namespace {

constexpr const char* trainer_type_name = "trainer";
constexpr const char* evaluator_type_name = "evaluator";

gpu::layer_spec layer_of(const topology::Layer& l) {
  gpu::layer_spec s;
  s.type = l.type();
  s.units = l.units();
  s.filters = l.filters();
  s.kernel = l.kernel();
  if (l.has_stride())
    s.stride = l.stride();
  s.padding = l.padding();
  if (l.has_pool())
    s.pool = l.pool();
  s.pool_stride = l.pool_stride();
  s.rate = l.rate();
  s.rows = l.rows();
  s.dim = l.dim();
  return s;
}

gpu::optimizer_config optimizer_of(const topology::Optimizer& o) {
  gpu::optimizer_config c;
  c.type = o.type().empty() ? "sgd" : o.type();
  c.learning_rate = o.has_learning_rate() ? o.learning_rate()
                    : c.type == "adam"    ? 0.001
                                          : 0.01;
  if (o.has_momentum())
    c.momentum = o.momentum();
  c.nesterov = o.nesterov();
  if (o.has_beta1())
    c.beta1 = o.beta1();
  if (o.has_beta2())
    c.beta2 = o.beta2();
  c.epsilon = o.has_epsilon() ? o.epsilon()
              : c.type == "adagrad" ? 1e-10
                                    : 1e-7;
  if (o.has_initial_accumulator())
    c.initial_accumulator = o.initial_accumulator();
  if (o.has_decay_rate())
    c.decay_rate = o.decay_rate();
  if (o.has_decay_steps())
    c.decay_steps = o.decay_steps();
  return c;
}

// The leading identifier of `text` if it names a field of message `desc`.
std::string field_named(const google::protobuf::Descriptor* desc,
                        const std::string& text) {
  size_t n = 0;
  while (n < text.size()
         && (std::isalnum(static_cast<unsigned char>(text[n]))
             || text[n] == '_'))
    ++n;
  auto word = text.substr(0, n);
  return desc->FindFieldByName(word) != nullptr ? word : std::string{};
}

// "layer 2 (dense): units must be > 0": the path of that layer's field (or
// of the layer), so that the loader reports the line it is on.
std::string model_error_path(const std::string& msg) {
  std::string path = "training.model";
  if (msg.rfind("layer ", 0) != 0 || msg.size() < 7
      || !std::isdigit(static_cast<unsigned char>(msg[6])))
    return path;
  if (msg.find(" (features): ") != std::string::npos)
    return path + ".inputs";
  path += ".layer[" + std::to_string(std::atoi(msg.c_str() + 6)) + "]";
  auto colon = msg.find("): ");
  if (colon == std::string::npos)
    return path;
  auto rest = msg.substr(colon + 3);
  if (rest.rfind("unknown layer type", 0) == 0)
    return path + ".type";
  auto field = field_named(topology::Layer::descriptor(), rest);
  return field.empty() ? path : path + "." + field;
}

// "unknown optimizer ..." or "adam: beta2 must be ...": the field's path.
std::string optimizer_error_path(const std::string& msg) {
  std::string path = "training.optimizer";
  if (msg.rfind("unknown optimizer", 0) == 0)
    return path + ".type";
  auto colon = msg.find(": ");
  if (colon == std::string::npos)
    return path;
  auto field =
    field_named(topology::Optimizer::descriptor(), msg.substr(colon + 2));
  return field.empty() ? path : path + "." + field;
}

// A model's named inputs (TrainingModel.inputs and .table): fills
// t.inputs, the input shape [F + D] and the features layer in front of the
// user's layers.
void read_inputs(const topology::TrainingModel& m, training_spec& t,
                 std::vector<topology_problem>& problems) {
  const std::string at = "training.model.";
  if (!m.input().empty() || m.input_shape_size() > 0)
    problems.push_back({at + "inputs",
                        "training.model: a model with named inputs has no "
                        "input or input_shape (its inputs say both)"});
  struct table_info {
    int64_t offset = 0, rows = 0;
    bool used = false;
  };
  std::map<std::string, table_info> tables;
  std::map<std::string, int> table_index; // for the line of a problem
  std::set<std::string> refused;          // reported already
  int64_t total_rows = 0;
  for (int i = 0; i < m.table_size(); ++i) {
    auto& tb = m.table(i);
    auto path = at + "table[" + std::to_string(i) + "]";
    if (tb.name().empty() || tables.count(tb.name()) > 0) {
      problems.push_back({path + ".name",
                          "training.model.table needs a unique name, got \""
                            + tb.name() + "\""});
      continue;
    }
    if (tb.rows() <= 0) {
      refused.insert(tb.name());
      problems.push_back({path + ".rows",
                          "training.model.table '" + tb.name()
                            + "': rows must be > 0, got "
                            + std::to_string(tb.rows())});
      continue;
    }
    tables[tb.name()] = {total_rows, tb.rows()};
    table_index[tb.name()] = i;
    total_rows += tb.rows();
  }
  std::vector<model_input> numeric;
  std::set<std::string> fields;
  int64_t ids = 0, floats = 0;
  for (int i = 0; i < m.inputs_size(); ++i) {
    auto& in = m.inputs(i);
    auto path = at + "inputs[" + std::to_string(i) + "]";
    model_input x;
    x.field = in.field();
    x.width = in.has_width() ? in.width() : 1;
    if (x.field.empty() || !fields.insert(x.field).second) {
      problems.push_back({path + ".field",
                          "training.model.inputs needs a batch field, each "
                          "once, got \"" + x.field + "\""});
      continue;
    }
    if (x.width < 1) {
      problems.push_back({path + ".width",
                          "training.model.inputs '" + x.field
                            + "': width must be >= 1, got "
                            + std::to_string(x.width)});
      continue;
    }
    if (in.table().empty()) {
      floats += x.width;
      numeric.push_back(x);
      continue;
    }
    auto it = tables.find(in.table());
    if (it == tables.end()) {
      if (refused.count(in.table()) > 0)
        continue;
      problems.push_back({path + ".table",
                          "training.model.inputs '" + x.field
                            + "' names table '" + in.table()
                            + "', which training.model.table does not "
                              "declare"});
      continue;
    }
    it->second.used = true;
    x.table = in.table();
    x.offset = it->second.offset;
    x.rows = it->second.rows;
    ids += x.width;
    t.inputs.push_back(x);
  }
  for (auto& [name, info] : tables)
    if (!info.used)
      problems.push_back({at + "table[" + std::to_string(table_index[name])
                            + "].name",
                          "training.model.table '" + name
                            + "' is used by no input"});
  if (ids == 0)
    problems.push_back({at + "inputs",
                        "training.model.inputs needs at least one "
                        "categorical input (one that names a table); a "
                        "model of numeric inputs only takes input and "
                        "input_shape"});
  t.inputs.insert(t.inputs.end(), numeric.begin(), numeric.end());
  for (int i = 0; i < m.layer_size(); ++i)
    if (m.layer(i).type() == "embedding" || m.layer(i).type() == "features")
      problems.push_back({at + "layer[" + std::to_string(i) + "].type",
                          "training.model: layer " + std::to_string(i)
                            + " (" + m.layer(i).type()
                            + "): a model with named inputs looks its ids "
                              "up in its tables; its layers start after "
                              "that"});
  gpu::layer_spec f;
  f.type = "features";
  f.rows = total_rows;
  f.dim = m.has_embedding_dim() ? m.embedding_dim() : 16;
  f.ids = ids;
  if (f.dim < 1)
    problems.push_back({at + "embedding_dim",
                        "training.model.embedding_dim must be >= 1, got "
                          + std::to_string(f.dim)});
  t.model.input_shape = {ids + floats};
  t.model.layers.push_back(f);
}

// The module's bytes: as the topology carries them (the loader fills them
// in from the file), else read from the file.
std::shared_ptr<const std::string>
module_bytes(const topology::TorchScriptModel& ts, std::string& error) {
  if (!ts.module().empty())
    return std::make_shared<const std::string>(ts.module());
  struct stat info {};
  if (::stat(ts.file().c_str(), &info) != 0) {
    error = "cannot open '" + ts.file() + "': " + std::strerror(errno);
    return nullptr;
  }
  if (!S_ISREG(info.st_mode)) {
    error = "'" + ts.file() + "' is not a regular file";
    return nullptr;
  }
  if (static_cast<uint64_t>(info.st_size) > max_topology_bytes / 4) {
    error = "'" + ts.file() + "' is " + std::to_string(info.st_size)
            + " bytes; a module travels to the nodes inside the topology, "
              "which holds at most "
            + std::to_string((max_topology_bytes / 4) >> 20) + " MiB of it";
    return nullptr;
  }
  std::ifstream in{ts.file(), std::ios::binary};
  if (!in) {
    error = "cannot open '" + ts.file() + "': " + std::strerror(errno);
    return nullptr;
  }
  auto bytes = std::make_shared<std::string>(
    std::istreambuf_iterator<char>{in}, std::istreambuf_iterator<char>{});
  if (in.bad()) {
    error = "cannot read '" + ts.file() + "'";
    return nullptr;
  }
  return bytes;
}

// training.model.torchscript: the module's variables, its inputs in their
// order, and the tables its categorical inputs look their ids up in.
void read_torchscript_model(const topology::TrainingModel& m,
                            training_spec& t,
                            std::vector<topology_problem>& problems) {
  const std::string at = "training.model.";
  auto& ts = m.torchscript();
  auto before = problems.size();
  if (!m.input().empty() || m.input_shape_size() > 0 || m.layer_size() > 0
      || !m.loss().empty())
    problems.push_back({at + "torchscript",
                        "training.model: a TorchScript model has no input, "
                        "input_shape, layer or loss (its module and inputs "
                        "say all of it)"});
  if (ts.file().empty()) {
    problems.push_back({at + "torchscript.file",
                        "training.model.torchscript.file must name the "
                        "module's file (torch.jit.save)"});
    return;
  }
  torchscript_spec spec;
  spec.file = ts.file();
  std::string error;
  spec.module = module_bytes(ts, error);
  if (!spec.module) {
    problems.push_back({at + "torchscript.file",
                        "training.model.torchscript.file: " + error});
    return;
  }
  // Nodes receive the module inside the topology's text (octal escapes:
  // up to 4 bytes a byte), which is limited to max_topology_bytes.
  if (spec.module->size() > max_topology_bytes / 4 - (64u << 10))
    problems.push_back({at + "torchscript.file",
                        "training.model.torchscript.file: '" + ts.file()
                          + "' is " + std::to_string(spec.module->size())
                          + " bytes; a module travels to the nodes inside "
                            "the topology, which holds at most "
                          + std::to_string((max_topology_bytes / 4) >> 20)
                          + " MiB of it"});
  // Tables, as a model with named inputs declares them.
  std::map<std::string, std::pair<int64_t, int64_t>> tables; // offset, rows
  for (int i = 0; i < m.table_size(); ++i) {
    auto& tb = m.table(i);
    auto path = at + "table[" + std::to_string(i) + "]";
    if (tb.name().empty() || tables.count(tb.name()) > 0)
      problems.push_back({path + ".name",
                          "training.model.table needs a unique name, got \""
                            + tb.name() + "\""});
    else if (tb.rows() <= 0)
      problems.push_back({path + ".rows",
                          "training.model.table '" + tb.name()
                            + "': rows must be > 0, got "
                            + std::to_string(tb.rows())});
    else {
      tables[tb.name()] = {spec.table_rows, tb.rows()};
      spec.table_rows += tb.rows();
    }
  }
  spec.embedding_dim = m.has_embedding_dim() ? m.embedding_dim() : 16;
  if (spec.table_rows > 0 && spec.embedding_dim < 1)
    problems.push_back({at + "embedding_dim",
                        "training.model.embedding_dim must be >= 1, got "
                          + std::to_string(spec.embedding_dim)});
  std::set<std::string> fields;
  std::vector<std::string> names;
  for (int i = 0; i < m.inputs_size(); ++i) {
    auto& in = m.inputs(i);
    auto path = at + "inputs[" + std::to_string(i) + "]";
    model_input x;
    x.field = in.field();
    if (x.field.empty() || !fields.insert(x.field).second) {
      problems.push_back({path + ".field",
                          "training.model.inputs needs a batch field, each "
                          "once, got \"" + x.field + "\""});
      continue;
    }
    if (in.has_width())
      problems.push_back({path + ".width",
                          "training.model.inputs '" + x.field
                            + "': a TorchScript model takes the field's own "
                              "shape; leave width unset"});
    if (!in.table().empty()) {
      auto it = tables.find(in.table());
      if (it == tables.end())
        problems.push_back({path + ".table",
                            "training.model.inputs '" + x.field
                              + "' names table '" + in.table()
                              + "', which training.model.table does not "
                                "declare"});
      else {
        x.table = in.table();
        x.offset = it->second.first;
        x.rows = it->second.second;
      }
    }
    names.push_back(x.field);
    spec.inputs.push_back(std::move(x));
  }
  if (m.inputs_size() == 0)
    problems.push_back({at + "inputs",
                        "training.model.inputs must list the batch fields "
                        "that the module's forward takes, in its order"});
  if (problems.size() != before)
    return;
  try {
    auto info = read_torchscript(*spec.module, spec.file, names);
    t.params = std::move(info.variables);
  } catch (const std::exception& ex) {
    problems.push_back({at + "torchscript.file", ex.what()});
    return;
  }
  if (spec.table_rows > 0) {
    gpu::param_spec p;
    p.name = "tables";
    p.shape = {spec.table_rows, spec.embedding_dim};
    p.sparse = true;
    p.init_limit = 0.05f; // as the built-in embedding tables
    t.params.push_back(std::move(p));
  }
  t.torchscript = std::move(spec);
}

// "layer 2 (dense): ..." of a model whose layer 0 is the features layer:
// the user's layer 1, as the topology numbers it.
std::string renumber_layer(const std::string& msg) {
  if (msg.rfind("layer ", 0) != 0 || msg.size() < 7
      || !std::isdigit(static_cast<unsigned char>(msg[6])))
    return msg;
  auto index = std::atoi(msg.c_str() + 6);
  if (index < 1)
    return msg;
  auto end = msg.find(' ', 6);
  return "layer " + std::to_string(index - 1) + msg.substr(end);
}

// Reads everything that can be read; collects what is wrong.
training_spec read(const topology::Topology& topo,
                   std::vector<topology_problem>& problems) {
  training_spec t;
  auto& tr = topo.training();
  auto& m = tr.model();
  t.input = m.input();
  t.label = m.label().empty() ? "label" : m.label();
  bool named = m.inputs_size() > 0 || m.table_size() > 0;
  auto before = problems.size();
  if (m.has_torchscript())
    read_torchscript_model(m, t, problems);
  else if (named)
    read_inputs(m, t, problems);
  else
    t.model.input_shape.assign(m.input_shape().begin(),
                               m.input_shape().end());
  for (auto& l : m.layer())
    t.model.layers.push_back(layer_of(l));
  t.model.loss = m.loss().empty() ? "softmax_cross_entropy" : m.loss();
  if (m.has_torchscript()) {
    // (read above)
  } else if (named) {
    if (problems.size() == before) {
      try {
        t.params = gpu::param_specs(t.model);
      } catch (const std::exception& ex) {
        auto msg = renumber_layer(ex.what());
        problems.push_back({model_error_path(msg), "training.model: " + msg});
      }
    }
  } else {
    for (int i = 0; i < m.layer_size(); ++i)
      if (m.layer(i).type() == "features")
        problems.push_back({"training.model.layer[" + std::to_string(i)
                              + "].type",
                            "training.model: layer " + std::to_string(i)
                              + " (features): not a layer to declare; a "
                                "model's table and inputs make it"});
    if (t.input.empty())
      problems.push_back({"training.model",
                          "training.model.input must name the batch field "
                          "that feeds the model"});
    bool shape_ok = !t.model.input_shape.empty();
    for (auto d : t.model.input_shape)
      shape_ok = shape_ok && d > 0;
    if (!shape_ok)
      problems.push_back({"training.model.input_shape",
                          "training.model.input_shape must list the "
                          "positive dimensions of one sample, e.g. [784] or "
                          "[1, 28, 28]"});
    else {
      try {
        t.params = gpu::param_specs(t.model);
      } catch (const std::exception& ex) {
        // "layer N (...)": point at that layer when the message names one.
        std::string msg = ex.what();
        problems.push_back({model_error_path(msg), "training.model: " + msg});
      }
    }
  }
  t.optimizer = optimizer_of(tr.optimizer());
  if (auto msg = gpu::check(t.optimizer); !msg.empty())
    problems.push_back({optimizer_error_path(msg),
                        "training.optimizer: " + msg});
  auto& ps = tr.ps();
  if (ps.has_shards() && ps.shards() < 1)
    problems.push_back({"training.ps.shards",
                        "training.ps.shards must be >= 1, got "
                          + std::to_string(ps.shards())});
  t.shards = ps.has_shards() && ps.shards() > 0
               ? static_cast<uint32_t>(ps.shards())
               : 1;
  if (ps.has_staleness()) {
    if (ps.staleness() < 0)
      problems.push_back({"training.ps.staleness",
                          "training.ps.staleness must be >= 0 (leave it "
                          "unset for unbounded staleness), got "
                            + std::to_string(ps.staleness())});
    else
      t.staleness = static_cast<uint64_t>(ps.staleness());
  }
  t.scale_lr_by_staleness = ps.scale_lr_by_staleness();
  if (!ps.wire().empty()) {
    if (auto w = wire_dtype_of(ps.wire()))
      t.wire = *w;
    else
      problems.push_back({"training.ps.wire",
                          "training.ps.wire must be \"f32\", \"bf16\" or "
                          "\"f16\", got \""
                            + ps.wire() + "\""});
  }
  if (tr.on_nonfinite() != "" && tr.on_nonfinite() != "skip"
      && tr.on_nonfinite() != "fail")
    problems.push_back({"training.on_nonfinite",
                        "training.on_nonfinite must be \"skip\" or \"fail\", "
                        "got \"" + tr.on_nonfinite() + "\""});
  t.fail_on_nonfinite = tr.on_nonfinite() == "fail";
  for (auto& s : topo.stage())
    if (s.type() == trainer_type_name)
      t.workers += static_cast<uint32_t>(replicas_of(s));
  t.seed = static_cast<uint64_t>(topo.runtime().seed());
  return t;
}

} // namespace

bool valid_device_spec(const std::string& spec) {
  if (spec == "cpu" || spec == "cuda")
    return true;
  if (spec.rfind("cuda:", 0) != 0 || spec.size() == 5)
    return false;
  for (size_t i = 5; i < spec.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(spec[i])))
      return false;
  return true;
}

training_spec training_spec_of(const topology::Topology& topo) {
  std::vector<topology_problem> problems;
  auto t = read(topo, problems);
  if (!problems.empty())
    throw std::invalid_argument(problems.front().message);
  return t;
}

std::vector<topology_problem> check_training(const topology::Topology& topo) {
  std::vector<topology_problem> problems;
  int trainer_stages = 0;
  int first_user = -1;
  for (int i = 0; i < topo.stage_size(); ++i) {
    auto& type = topo.stage(i).type();
    if (type == trainer_type_name)
      ++trainer_stages;
    if ((type == trainer_type_name || type == evaluator_type_name) && first_user < 0)
      first_user = i;
  }
  if (first_user < 0) {
    if (topo.has_training())
      problems.push_back({"training",
                          "the topology has a training section but no "
                          "trainer stage uses it"});
    return problems;
  }
  if (!topo.has_training()) {
    problems.push_back({"stage[" + std::to_string(first_user) + "]",
                        "stage '" + topo.stage(first_user).name()
                          + "' needs a training { model { ... } } section "
                            "in the topology"});
    return problems;
  }
  if (trainer_stages == 0)
    problems.push_back({"training",
                        "the topology has an evaluator but no trainer stage"});
  if (trainer_stages > 1)
    problems.push_back({"training",
                        "the topology has several trainer stages; use one "
                        "trainer stage with replicas"});
  auto spec = read(topo, problems);
  for (int i = 0; i < topo.stage_size(); ++i) {
    auto& s = topo.stage(i);
    // A replica holding a slot waits in its pull for the laggards, and a
    // laggard waits for a slot: a deadlock.
    if (s.type() == trainer_type_name && s.trainer().concurrent_steps() > 0
        && topo.training().ps().has_staleness())
      problems.push_back(
        {"stage[" + std::to_string(i) + "].trainer.concurrent_steps",
         "stage '" + s.name()
           + "': concurrent_steps cannot go with training.ps.staleness (a "
             "replica holding a step slot would wait in its pull for a "
             "replica waiting for a slot); leave one of them unset"});
    if (spec.torchscript
        && (s.type() == trainer_type_name || s.type() == evaluator_type_name)) {
      std::vector<std::string> devices;
      if (s.type() == trainer_type_name) {
        devices.assign(s.trainer().devices().begin(),
                       s.trainer().devices().end());
        devices.push_back(s.trainer().device());
      } else {
        devices.push_back(s.evaluator().device());
      }
      for (auto& d : devices)
        if (!d.empty() && d != "cpu") {
          auto field = s.type() == trainer_type_name ? ".trainer.device"
                                                     : ".evaluator.device";
          problems.push_back(
            {"stage[" + std::to_string(i) + "]" + field,
             "stage '" + s.name() + "': device \"" + d
               + "\": this build runs TorchScript models on the cpu only ("
               + torchscript_device_note() + ")"});
          break;
        }
    }
    if (s.type() == evaluator_type_name && !s.evaluator().reference_score().empty()
        && spec.softmax() && !spec.torchscript)
      problems.push_back(
        {"stage[" + std::to_string(i) + "].evaluator.reference_score",
         "stage '" + s.name()
           + "': reference_score is an AUC reference and needs a "
             "sigmoid_binary_cross_entropy model"});
  }
  return problems;
}

} // namespace af
