// `actorflow validate`: checks a topology file (and lists the stage types).
// Declared in apps/actorflow/cmd_validate.hpp.
#include "apps/actorflow/cmd_validate.hpp"

#include <cstdio>
#include <memory>
#include <string>

#include "actorflow/runtime/topology/topology.hpp"
#include "apps/actorflow/options.hpp"

namespace af::cli {

namespace {

struct validate_args {
  std::string topology;
  bool list_types = false;
};

int cmd_validate(const validate_args& args, const registry& reg) {
  const auto& path = args.topology;
  if (args.list_types) {
    // Each type's line, and below it the config block with the fields it
    // requires (stage_type::config_required), when it has one.
    for (auto* t : reg.list()) {
      std::printf("%-19s %-9s %s\n", t->name.c_str(), to_string(t->kind),
                  t->description.c_str());
      if (auto block = config_synopsis(*t); !block.empty())
        std::printf("%-19s %-9s %s\n", "", "", block.c_str());
    }
    if (path.empty())
      return exit_ok;
  }
  if (path.empty()) {
    std::fprintf(stderr, "validate: a topology file is required (or use "
                         "--list-types)\n");
    return exit_usage;
  }
  auto loaded = load_topology_file(path, reg);
  if (!loaded.ok()) {
    print_errors(loaded);
    return exit_usage;
  }
  auto& spec = loaded.topology->spec;
  int64_t actors = 0;
  for (auto& s : spec.stage())
    actors += replicas_of(s);
  std::printf("%s: ok (%d stages, %lld stage replicas)\n", path.c_str(),
              spec.stage_size(), static_cast<long long>(actors));
  return exit_ok;
}

} // namespace

void add_validate(CLI::App& app, const registry& reg,
                  std::function<int()>& action) {
  auto args = std::make_shared<validate_args>();
  auto* validate = app.add_subcommand(
    "validate", "Check a topology file and report every problem as "
                "file:line: message");
  validate->add_option("topology", args->topology, "Topology file (.pbtxt)");
  validate->add_flag("--list-types", args->list_types,
                     "List the registered stage types");
  validate->callback([args, &reg, &action] {
    action = [args, &reg] { return cmd_validate(*args, reg); };
  });
}

} // namespace af::cli
