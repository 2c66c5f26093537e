// `actorflow export`: a checkpoint's trained parameters and buffers written
// back into the TorchScript module they came from, for torch.jit.load
// (serving, fine-tuning). Declared in apps/actorflow/export.hpp.
#include "apps/actorflow/export.hpp"

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "actorflow/actors/ps_shard/ps_shard.hpp"
#include "actorflow/actors/training/torchscript_model.hpp"
#include "actorflow/runtime/protocol/ps.hpp"
#include "actorflow/runtime/state/checkpoint.hpp"
#include "apps/actorflow/options.hpp"

namespace af::cli {

namespace {

struct export_args {
  std::string checkpoint; // the job's checkpoint directory
  std::string module;     // the TorchScript file the job trained
  std::string out;
  int64_t step = -1;      // -1: the newest complete checkpoint
};

// Each dense variable of the checkpoint, whole: the shards' slices put
// together. Sparse variables (the engine's embedding tables) are not part
// of the module and are left out.
std::map<std::string, std::vector<float>>
variables_of(const checkpoint& c, const std::string& dir) {
  struct whole {
    std::vector<float> values;
    uint64_t filled = 0;
  };
  std::map<std::string, whole> vars;
  uint32_t shards = 0;
  std::vector<bool> seen;
  for (auto& part : c.parts) {
    if (part.name.rfind("ps[", 0) != 0)
      continue;
    ps_snapshot_values snap;
    try {
      snap = read_ps_snapshot(part.bytes);
    } catch (const std::exception& e) {
      throw std::runtime_error(dir + ": part " + part.name + ": " + e.what());
    }
    if (shards == 0) {
      shards = snap.shards;
      seen.assign(shards, false);
    } else if (snap.shards != shards) {
      throw std::runtime_error(dir + ": part " + part.name + " is of "
                               + std::to_string(snap.shards)
                               + " shards, an earlier part of "
                               + std::to_string(shards));
    }
    seen[snap.shard] = true;
    for (auto& v : snap.vars) {
      if (v.sparse)
        continue;
      uint64_t size = 1;
      for (auto d : v.shape)
        size *= static_cast<uint64_t>(d);
      auto& w = vars[v.name];
      w.values.resize(size);
      auto r = ps_dense_slice(size, snap.shard, snap.shards);
      if (v.values.size() != r.hi - r.lo)
        throw std::runtime_error(dir + ": part " + part.name + ": variable '"
                                 + v.name + "' holds "
                                 + std::to_string(v.values.size())
                                 + " values, its slice is "
                                 + std::to_string(r.hi - r.lo));
      std::copy(v.values.begin(), v.values.end(),
                w.values.begin() + static_cast<std::ptrdiff_t>(r.lo));
      w.filled += r.hi - r.lo;
    }
  }
  if (shards == 0)
    throw std::runtime_error(dir + ": the checkpoint of step "
                             + std::to_string(c.step)
                             + " holds no parameter-server shard (was it "
                               "written by a training job?)");
  for (uint32_t s = 0; s < shards; ++s)
    if (!seen[s])
      throw std::runtime_error(dir + ": the checkpoint of step "
                               + std::to_string(c.step) + " lacks shard "
                               + std::to_string(s) + " of "
                               + std::to_string(shards));
  std::map<std::string, std::vector<float>> out;
  for (auto& [name, w] : vars)
    out.emplace(name, std::move(w.values));
  return out;
}

int run_export(const export_args& a) {
  if (std::string why; !torchscript_available(&why)) {
    std::fprintf(stderr, "actorflow export: %s\n", why.c_str());
    return exit_failure;
  }
  checkpoint_store store{a.checkpoint};
  std::optional<checkpoint> c;
  if (a.step >= 0) {
    std::string why;
    c = store.read(static_cast<uint64_t>(a.step), why);
    if (!c) {
      std::fprintf(stderr, "actorflow export: %s\n", why.c_str());
      return exit_failure;
    }
  } else {
    c = store.latest();
    if (!c) {
      std::fprintf(stderr,
                   "actorflow export: %s: no complete checkpoint there\n",
                   a.checkpoint.c_str());
      return exit_failure;
    }
  }
  std::ifstream in{a.module, std::ios::binary};
  if (!in) {
    std::fprintf(stderr, "actorflow export: cannot open '%s'\n",
                 a.module.c_str());
    return exit_failure;
  }
  std::string bytes{std::istreambuf_iterator<char>{in},
                    std::istreambuf_iterator<char>{}};
  auto values = variables_of(*c, a.checkpoint);
  auto trained = torchscript_with_values(bytes, a.module, values);
  auto tmp = a.out + ".tmp";
  {
    std::ofstream out{tmp, std::ios::binary | std::ios::trunc};
    out.write(trained.data(), static_cast<std::streamsize>(trained.size()));
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      std::fprintf(stderr, "actorflow export: cannot write '%s'\n",
                   a.out.c_str());
      return exit_failure;
    }
  }
  if (std::rename(tmp.c_str(), a.out.c_str()) != 0) {
    std::remove(tmp.c_str());
    std::fprintf(stderr, "actorflow export: cannot write '%s'\n",
                 a.out.c_str());
    return exit_failure;
  }
  std::printf("wrote %s: the parameters and buffers of step %llu (%zu "
              "variables) in %s\n",
              a.out.c_str(), static_cast<unsigned long long>(c->step),
              values.size(), a.module.c_str());
  return exit_ok;
}

} // namespace

void add_export(CLI::App& app, std::function<int()>& action) {
  auto a = std::make_shared<export_args>();
  auto* cmd = app.add_subcommand(
    "export", "Write a checkpoint's trained parameters and buffers into the "
              "TorchScript module the job trained (torch.jit.load reads "
              "the result)");
  cmd->add_option("--checkpoint", a->checkpoint,
                  "The job's checkpoint directory (checkpoint.dir)")
    ->required();
  cmd->add_option("--module", a->module,
                  "The TorchScript file the job trained "
                  "(training.model.torchscript.file)")
    ->required();
  cmd->add_option("--out", a->out, "The trained module's file")->required();
  cmd->add_option("--step", a->step,
                  "The checkpoint's step (default: the newest complete one)")
    ->check(CLI::NonNegativeNumber);
  cmd->callback([a, &action] { action = [a] { return run_export(*a); }; });
}

} // namespace af::cli
