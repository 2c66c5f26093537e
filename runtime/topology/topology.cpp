// Loading and validating topology files (protobuf text format, schema in
// proto/topology.proto). Declared in runtime/topology/topology.hpp.
#include "actorflow/runtime/topology/topology.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <iterator>
#include <functional>
#include <map>
#include <sys/stat.h>

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include "actorflow/runtime/net/address.hpp"

namespace af {

namespace pb = google::protobuf;

std::string topology_error::to_string() const {
  if (line > 0)
    return file + ":" + std::to_string(line) + ": " + message;
  return file + ": " + message;
}

int64_t replicas_of(const topology::Stage& s) {
  return s.has_replicas() ? s.replicas() : default_replicas;
}

int64_t max_replicas_of(const topology::Stage& s) {
  return s.has_max_replicas() ? s.max_replicas() : replicas_of(s);
}

int64_t window_of(const topology::Input& in) {
  return in.has_window() ? in.window() : default_window;
}

namespace {

class collector : public pb::io::ErrorCollector {
public:
  collector(std::string file, std::vector<topology_error>& errors)
    : file_(std::move(file)), errors_(errors) {}

  void AddError(int line, pb::io::ColumnNumber column,
                const std::string& message) override {
    errors_.push_back(
      topology_error{file_, line + 1,
                     "column " + std::to_string(column + 1) + ": " + message});
  }

  void AddWarning(int, pb::io::ColumnNumber, const std::string&) override {}

private:
  std::string file_;
  std::vector<topology_error>& errors_;
};

// Line lookups in the parse tree (0-based there, 1-based here). Falls back
// to the enclosing element's line when a field was not written explicitly.
int line_of(const pb::TextFormat::ParseInfoTree* tree,
            const pb::FieldDescriptor* field, int index, int fallback) {
  if (tree == nullptr)
    return fallback;
  auto loc = tree->GetLocation(field, index);
  return loc.line >= 0 ? loc.line + 1 : fallback;
}

class validator {
public:
  validator(const std::string& file, const topology::Topology& spec,
            const pb::TextFormat::ParseInfoTree& tree, const registry& reg,
            std::vector<topology_error>& errors)
    : file_(file), spec_(spec), tree_(tree), reg_(reg), errors_(errors) {}

  loaded_topology run() {
    auto* topo_desc = topology::Topology::descriptor();
    auto* stage_field = topo_desc->FindFieldByName("stage");
    loaded_topology result;
    result.file = file_;
    if (spec_.stage_size() == 0)
      error(1, "the topology defines no stage");
    for (int i = 0; i < spec_.stage_size(); ++i)
      result.stage_line.push_back(line_of(&tree_, stage_field, i, 1));
    lines_ = result.stage_line;
    check_names();
    check_stages();
    check_edges();
    result.order = check_cycles();
    check_runtime();
    check_hosts();
    check_checkpoints();
    for (auto& check : reg_.topology_checks()) {
      std::vector<topology_problem> problems;
      try {
        problems = check(spec_);
      } catch (const std::exception& ex) {
        problems.push_back({"", ex.what()});
      }
      for (auto& problem : problems)
        error(path_line(problem.path), problem.message);
    }
    return result;
  }

private:
  void error(int line, std::string message) {
    errors_.push_back(topology_error{file_, line, std::move(message)});
  }

  const pb::TextFormat::ParseInfoTree* stage_tree(int i) const {
    auto* f = topology::Topology::descriptor()->FindFieldByName("stage");
    return tree_.GetTreeForNested(f, i);
  }

  int field_line(int stage, const char* name, int index = -1) const {
    auto* f = topology::Stage::descriptor()->FindFieldByName(name);
    return line_of(stage_tree(stage), f, index, lines_[stage]);
  }

  int input_field_line(int stage, int input, const char* name) const {
    auto* in_field = topology::Stage::descriptor()->FindFieldByName("input");
    auto* st = stage_tree(stage);
    auto fallback = field_line(stage, "input", input);
    auto* sub = st ? st->GetTreeForNested(in_field, input) : nullptr;
    auto* f = topology::Input::descriptor()->FindFieldByName(name);
    return line_of(sub, f, -1, fallback);
  }

  // The line of a field path such as "training.model.layer[2].units":
  // the deepest part that was written in the file.
  int path_line(const std::string& path) const {
    const pb::Descriptor* desc = topology::Topology::descriptor();
    const pb::TextFormat::ParseInfoTree* tree = &tree_;
    int line = 1;
    size_t pos = 0;
    while (pos < path.size() && tree != nullptr && desc != nullptr) {
      auto end = path.find('.', pos);
      auto part = path.substr(pos, end == std::string::npos ? end : end - pos);
      pos = end == std::string::npos ? path.size() : end + 1;
      int index = -1;
      if (auto br = part.find('['); br != std::string::npos) {
        index = std::atoi(part.c_str() + br + 1);
        part.resize(br);
      }
      auto* field = desc->FindFieldByName(part);
      if (field == nullptr)
        break;
      if (!field->is_repeated())
        index = -1;
      else if (index < 0)
        index = 0; // the first value stands for a repeated field
      line = line_of(tree, field, index, line);
      if (field->type() != pb::FieldDescriptor::TYPE_MESSAGE)
        break;
      tree = tree->GetTreeForNested(field, index);
      desc = field->message_type();
    }
    return line;
  }

  void check_names() {
    for (int i = 0; i < spec_.stage_size(); ++i) {
      auto& s = spec_.stage(i);
      if (s.name().empty()) {
        error(lines_[i], "stage has no name");
        continue;
      }
      auto valid_char = [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_'
               || c == '-' || c == '.';
      };
      if (!std::all_of(s.name().begin(), s.name().end(), valid_char))
        error(field_line(i, "name"),
              "stage name '" + s.name()
                + "' may only contain letters, digits, '_', '-' and '.'");
      auto [it, inserted] = index_.emplace(s.name(), i);
      if (!inserted)
        error(field_line(i, "name"),
              "duplicate stage name '" + s.name() + "' (first defined on line "
                + std::to_string(lines_[it->second]) + ")");
    }
  }

  void check_stages() {
    for (int i = 0; i < spec_.stage_size(); ++i) {
      auto& s = spec_.stage(i);
      if (replicas_of(s) < 1)
        error(field_line(i, "replicas"), "stage '" + s.name()
                                           + "': replicas must be >= 1, got "
                                           + std::to_string(s.replicas()));
      if (s.type().empty()) {
        error(lines_[i], "stage '" + s.name() + "' has no type");
        continue;
      }
      auto* type = reg_.find(s.type());
      if (type == nullptr) {
        std::string known;
        for (auto* t : reg_.list())
          known += (known.empty() ? "" : ", ") + t->name;
        error(field_line(i, "type"), "stage '" + s.name()
                                       + "': unknown stage type '" + s.type()
                                       + "' (known types: " + known + ")");
        continue;
      }
      check_max_replicas(i, *type);
      if (auto missing = missing_config(s, *type); !missing.empty()) {
        error(lines_[i],
              "stage '" + s.name() + "' (" + s.type() + "): " + missing);
        continue;
      }
      if (type->check) {
        // A check of an application's own type may throw: a problem too.
        std::string msg;
        try {
          msg = type->check(s);
        } catch (const std::exception& ex) {
          msg = ex.what();
          if (msg.empty())
            msg = "the stage type's check failed";
        }
        if (!msg.empty())
          error(lines_[i],
                "stage '" + s.name() + "' (" + s.type() + "): " + msg);
      }
    }
  }

  void check_edges() {
    consumers_.assign(spec_.stage_size(), {});
    for (int i = 0; i < spec_.stage_size(); ++i) {
      auto& s = spec_.stage(i);
      std::map<std::string, int> seen;
      for (int j = 0; j < s.input_size(); ++j) {
        auto& in = s.input(j);
        auto line = field_line(i, "input", j);
        if (window_of(in) < 1)
          error(input_field_line(i, j, "window"),
                "stage '" + s.name() + "': window of input '" + in.stage()
                  + "' must be >= 1, got " + std::to_string(in.window()));
        if (in.byte_budget() < 0)
          error(input_field_line(i, j, "byte_budget"),
                "stage '" + s.name() + "': byte_budget of input '" + in.stage()
                  + "' must be >= 0 (0 = unlimited)");
        auto it = index_.find(in.stage());
        if (in.stage().empty()) {
          error(line, "stage '" + s.name() + "': input names no stage");
          continue;
        }
        if (it == index_.end()) {
          error(line, "stage '" + s.name() + "': input '" + in.stage()
                        + "' names a stage that does not exist");
          continue;
        }
        if (!seen.emplace(in.stage(), j).second)
          error(line, "stage '" + s.name() + "' lists input '" + in.stage()
                        + "' twice");
        consumers_[it->second].push_back(i);
      }
    }
    for (int i = 0; i < spec_.stage_size(); ++i) {
      auto& s = spec_.stage(i);
      auto* type = reg_.find(s.type());
      auto& users = consumers_[i];
      if (users.size() > 1) {
        error(lines_[i],
              "stage '" + s.name() + "' feeds several stages ('"
                + spec_.stage(users[0]).name() + "', '"
                + spec_.stage(users[1]).name()
                + "'); a stage feeds one consumer stage (use replicas to "
                  "spread work)");
      }
      if (type == nullptr)
        continue;
      auto kind = type->kind;
      if (kind == stage_kind::source && s.input_size() > 0)
        error(field_line(i, "input", 0), "stage '" + s.name()
                                           + "' is a source (" + s.type()
                                           + ") and takes no input");
      if (kind != stage_kind::source && s.input_size() == 0)
        error(lines_[i], "stage '" + s.name() + "' (" + s.type()
                           + ") needs at least one input");
      if (kind == stage_kind::sink && !users.empty())
        error(field_line(users[0], "input", 0),
              "stage '" + spec_.stage(users[0]).name() + "' takes input from '"
                + s.name() + "', which is a sink (" + s.type()
                + ") and produces nothing");
      if (kind != stage_kind::sink && users.empty())
        error(lines_[i], "stage '" + s.name() + "' (" + s.type()
                           + ") has no consumer; end the graph with a sink");
    }
  }

  std::vector<size_t> check_cycles() {
    // Kahn's algorithm; whatever is left over lies on or behind a cycle.
    auto n = static_cast<size_t>(spec_.stage_size());
    std::vector<size_t> pending(n, 0);
    for (size_t i = 0; i < n; ++i)
      for (auto& in : spec_.stage(static_cast<int>(i)).input())
        if (index_.count(in.stage()))
          ++pending[i];
    std::vector<size_t> order;
    for (size_t i = 0; i < n; ++i)
      if (pending[i] == 0)
        order.push_back(i);
    for (size_t k = 0; k < order.size(); ++k)
      for (auto user : consumers_[order[k]])
        if (--pending[static_cast<size_t>(user)] == 0)
          order.push_back(static_cast<size_t>(user));
    if (order.size() == n)
      return order;
    // Walk inputs from a stage that is still pending until one repeats.
    size_t start = 0;
    while (pending[start] == 0)
      ++start;
    std::vector<size_t> path;
    std::vector<int> pos(n, -1);
    size_t cur = start;
    while (pos[cur] < 0) {
      pos[cur] = static_cast<int>(path.size());
      path.push_back(cur);
      for (auto& in : spec_.stage(static_cast<int>(cur)).input()) {
        auto it = index_.find(in.stage());
        if (it != index_.end() && pending[static_cast<size_t>(it->second)]) {
          cur = static_cast<size_t>(it->second);
          break;
        }
      }
    }
    std::string cycle;
    for (auto k = static_cast<size_t>(pos[cur]); k < path.size(); ++k)
      cycle += spec_.stage(static_cast<int>(path[k])).name() + " <- ";
    cycle += spec_.stage(static_cast<int>(cur)).name();
    error(lines_[cur], "the stages form a cycle: " + cycle);
    return order;
  }

  // Stage.max_replicas: only a stage whose replicas may come and go (a
  // trainer: its producers re-send, nothing consumes it) on nodes.
  void check_max_replicas(int i, const stage_type& type) {
    auto& s = spec_.stage(i);
    if (!s.has_max_replicas())
      return;
    auto line = field_line(i, "max_replicas");
    auto name = "stage '" + s.name() + "': ";
    if (s.max_replicas() < replicas_of(s)) {
      error(line, name + "max_replicas (" + std::to_string(s.max_replicas())
                    + ") is below replicas ("
                    + std::to_string(replicas_of(s)) + ")");
      return;
    }
    if (s.max_replicas() == replicas_of(s))
      return;
    if (!type.resend_unfinished)
      error(line, name + "max_replicas needs a stage type whose replicas "
                    "may join a running job (trainer), not '" + s.type()
                    + "'");
    else if (s.hosts_size() == 0)
      error(line, name + "max_replicas needs hosts: replicas join on nodes "
                    "of its placement that start after the job began");
    for (auto& other : spec_.stage())
      for (auto& in : other.input())
        if (in.stage() == s.name())
          error(line, name + "max_replicas needs a stage that nothing "
                        "consumes, and stage '" + other.name()
                        + "' reads it");
  }

  // Nodes (Topology.host) and the placements that name them.
  void check_hosts() {
    std::map<std::string, int> names;
    for (int i = 0; i < spec_.host_size(); ++i) {
      auto& h = spec_.host(i);
      auto line = path_line("host[" + std::to_string(i) + "]");
      if (h.name().empty())
        error(line, "host has no name");
      else if (!names.emplace(h.name(), i).second)
        error(line, "duplicate host name '" + h.name() + "'");
      auto addr = parse_address(h.address());
      if (!addr || addr->port == 0)
        error(path_line("host[" + std::to_string(i) + "].address"),
              "host '" + h.name() + "': address must be HOST:PORT with a "
              "port in 1..65535, got '" + h.address() + "'");
    }
    for (int i = 0; i < spec_.stage_size(); ++i)
      for (int j = 0; j < spec_.stage(i).hosts_size(); ++j) {
        auto& name = spec_.stage(i).hosts(j);
        if (!names.count(name))
          error(field_line(i, "hosts", j),
                "stage '" + spec_.stage(i).name() + "' is placed on host '"
                  + name + "', which no host { name: ... } defines");
      }
    auto& ps = spec_.training().ps();
    for (int j = 0; j < ps.hosts_size(); ++j)
      if (!names.count(ps.hosts(j)))
        error(path_line("training.ps.hosts[" + std::to_string(j) + "]"),
              "training.ps is placed on host '" + ps.hosts(j)
                + "', which no host { name: ... } defines");
  }

  void check_checkpoints() {
    if (!spec_.has_checkpoint())
      return;
    auto& c = spec_.checkpoint();
    auto line = [&](const char* field) {
      return path_line(std::string{"checkpoint."} + field);
    };
    if (c.dir().empty())
      error(path_line("checkpoint"),
            "checkpoint.dir is required (the directory the checkpoints go "
            "to)");
    if (c.every_steps() < 0)
      error(line("every_steps"), "checkpoint.every_steps must be >= 0");
    if (c.has_every_seconds() && !(c.every_seconds() >= 0))
      error(line("every_seconds"), "checkpoint.every_seconds must be >= 0");
    if (c.has_keep() && c.keep() < 1)
      error(line("keep"), "checkpoint.keep must be >= 1");
    if (spec_.runtime().deterministic())
      error(path_line("checkpoint"),
            "checkpoints do not support runtime.deterministic yet (the "
            "reorder buffers are not part of the cut)");
    if (spec_.runtime().autotune())
      error(path_line("checkpoint"),
            "checkpoints do not support runtime.autotune (a resumed job "
            "needs the replica counts it was checkpointed with; autotune "
            "may choose others)");
    auto replayed = replayed_stages(spec_, reg_);
    for (int i = 0; i < spec_.stage_size(); ++i) {
      auto* type = reg_.find(spec_.stage(i).type());
      if (type != nullptr && !type->no_checkpoints.empty()
          && !replayed[static_cast<size_t>(i)])
        error(lines_[static_cast<size_t>(i)],
              "stage '" + spec_.stage(i).name() + "' (" + type->name
                + ") cannot be checkpointed: " + type->no_checkpoints
                + " (remove the checkpoint section, or this stage)");
    }
  }

  void check_deterministic() {
    if (!spec_.runtime().deterministic())
      return;
    for (int i = 0; i < spec_.stage_size(); ++i) {
      auto& s = spec_.stage(i);
      auto* type = reg_.find(s.type());
      if (type != nullptr && replicas_of(s) > 1 && !type->one_to_one)
        error(field_line(i, "replicas"),
              "stage '" + s.name() + "' (" + s.type()
                + ") has several replicas, which deterministic mode allows "
                  "only for one-to-one stages (parse, decode, transform)");
      if (s.input_size() > 1)
        error(field_line(i, "input", 1),
              "stage '" + s.name() + "' takes input from several stages, "
                                     "which deterministic mode does not allow");
    }
  }

  void check_runtime() {
    check_deterministic();
    if (!spec_.has_runtime())
      return;
    auto& rt = spec_.runtime();
    auto* d = topology::Runtime::descriptor();
    auto* rt_field =
      topology::Topology::descriptor()->FindFieldByName("runtime");
    auto base = line_of(&tree_, rt_field, -1, 1);
    auto* sub = tree_.GetTreeForNested(rt_field, -1);
    auto line = [&](const char* name) {
      return line_of(sub, d->FindFieldByName(name), -1, base);
    };
    if (rt.threads() < 0)
      error(line("threads"), "runtime.threads must be >= 0 (0 = all cores)");
    if (rt.has_scheduler() && rt.scheduler() != "stealing"
        && rt.scheduler() != "sharing")
      error(line("scheduler"), "runtime.scheduler must be \"stealing\" or "
                               "\"sharing\", got \""
                                 + rt.scheduler() + "\"");
    if (rt.cpu_budget() < 0)
      error(line("cpu_budget"), "runtime.cpu_budget must be >= 0");
    if (rt.ram_budget_bytes() < 0)
      error(line("ram_budget_bytes"), "runtime.ram_budget_bytes must be >= 0");
    if (rt.has_autotune_seconds() && !(rt.autotune_seconds() > 0))
      error(line("autotune_seconds"), "runtime.autotune_seconds must be > 0");
    if (rt.has_metrics_interval_s() && !(rt.metrics_interval_s() > 0))
      error(line("metrics_interval_s"),
            "runtime.metrics_interval_s must be > 0");
  }

  const std::string& file_;
  const topology::Topology& spec_;
  const pb::TextFormat::ParseInfoTree& tree_;
  const registry& reg_;
  std::vector<topology_error>& errors_;
  std::vector<int> lines_;
  std::map<std::string, int> index_;
  std::vector<std::vector<int>> consumers_;
};

void sort_errors(std::vector<topology_error>& errors) {
  std::stable_sort(errors.begin(), errors.end(),
                   [](auto& a, auto& b) { return a.line < b.line; });
}

// A TorchScript model's file goes with the topology (to the nodes, in its
// text), read once here; one that cannot be read is left for the training
// check to report with its field.
void inline_model_file(topology::Topology& spec) {
  if (!spec.has_training() || !spec.training().model().has_torchscript())
    return;
  auto* ts = spec.mutable_training()->mutable_model()->mutable_torchscript();
  if (!ts->module().empty() || ts->file().empty())
    return;
  // A regular file of at most what a topology's text can carry (a FIFO or
  // /dev/zero would never end).
  struct stat info {};
  if (::stat(ts->file().c_str(), &info) != 0 || !S_ISREG(info.st_mode)
      || static_cast<uint64_t>(info.st_size) > max_topology_bytes / 4)
    return;
  std::ifstream in{ts->file(), std::ios::binary};
  std::string bytes{std::istreambuf_iterator<char>{in},
                    std::istreambuf_iterator<char>{}};
  if (in && !bytes.empty())
    ts->set_module(std::move(bytes));
}

} // namespace

load_result load_topology_text(std::string_view text, const std::string& name,
                               const registry& reg) {
  load_result result;
  auto fail = [&](std::string msg) {
    result.errors.push_back(topology_error{name, 0, std::move(msg)});
    return result;
  };
  if (text.size() > max_topology_bytes)
    return fail("file is " + std::to_string(text.size())
                + " bytes; topology files are limited to "
                + std::to_string(max_topology_bytes >> 20) + " MiB");
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos)
    return fail("file is empty; a topology needs at least one stage");
  if (auto nul = text.find('\0'); nul != std::string_view::npos)
    return fail("not a text file (NUL byte at offset " + std::to_string(nul)
                + "); topology files are protobuf text format");
  topology::Topology spec;
  pb::TextFormat::Parser parser;
  collector errors{name, result.errors};
  pb::TextFormat::ParseInfoTree tree;
  parser.RecordErrorsTo(&errors);
  parser.WriteLocationsTo(&tree);
  if (!parser.ParseFromString(std::string{text}, &spec)) {
    if (result.errors.empty())
      return fail("cannot parse the file as protobuf text format");
    sort_errors(result.errors);
    return result;
  }
  inline_model_file(spec);
  validator v{name, spec, tree, reg, result.errors};
  auto topo = v.run();
  if (result.errors.empty()) {
    topo.spec = std::move(spec);
    result.topology = std::move(topo);
  }
  sort_errors(result.errors);
  return result;
}

load_result load_topology_file(const std::string& path, const registry& reg) {
  load_result result;
  auto fail = [&](std::string msg) {
    result.errors.push_back(topology_error{path, 0, std::move(msg)});
    return result;
  };
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0)
    return fail(std::string{"cannot open: "} + std::strerror(errno));
  if (S_ISDIR(info.st_mode))
    return fail("is a directory, not a topology file");
  if (static_cast<uint64_t>(info.st_size) > max_topology_bytes)
    return fail("file is " + std::to_string(info.st_size)
                + " bytes; topology files are limited to "
                + std::to_string(max_topology_bytes >> 20) + " MiB");
  std::ifstream in{path, std::ios::binary};
  if (!in)
    return fail(std::string{"cannot open: "} + std::strerror(errno));
  std::string text;
  text.resize(static_cast<size_t>(info.st_size));
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad() || static_cast<size_t>(in.gcount()) != text.size())
    return fail("cannot read the whole file");
  return load_topology_text(text, path, reg);
}

} // namespace af
