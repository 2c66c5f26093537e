// TorchScript models through the backend plugin (actors/training/torchscript_plugin.hpp):
// found and loaded on first use, or a clear error naming what is missing.
#include "actorflow/actors/training/torchscript_plugin.hpp"

#include <dlfcn.h>
#include <malloc.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace af {

namespace {

namespace fs = std::filesystem;

struct loaded {
  const detail::backend* backend = nullptr;
  std::string why; // when backend is null
};

#ifdef AF_TORCHSCRIPT_PLUGIN_NAME

// Where the plugin may be, in this order: ACTORFLOW_TORCHSCRIPT_PLUGIN
// (a path), next to the executable as installed (<bin>/../<libdir>/actorflow,
// which the build tree mirrors), the install prefix's, the build tree's.
std::vector<fs::path> candidates() {
  std::vector<fs::path> c;
  if (const char* env = std::getenv("ACTORFLOW_TORCHSCRIPT_PLUGIN");
      env != nullptr && *env != '\0')
    return {fs::path(env)};
  std::error_code ec;
  auto exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec)
    c.push_back(exe.parent_path() / AF_TORCHSCRIPT_PLUGIN_FROM_BIN
                / AF_TORCHSCRIPT_PLUGIN_NAME);
  c.emplace_back(AF_TORCHSCRIPT_PLUGIN_INSTALLED);
  c.emplace_back(AF_TORCHSCRIPT_PLUGIN_BUILT);
  return c;
}

loaded load() {
  std::string tried;
  for (const auto& path : candidates()) {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) {
      tried += (tried.empty() ? "" : ", ") + path.string();
      continue;
    }
    std::string q(1, '\'');
    q += path.string();
    q += '\'';
    // Never closed: libtorch does not unload.
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr)
      return {nullptr, "its backend " + q + " does not load: " + dlerror()
                         + " (Debian: the package libtorch1.13, which "
                           "libtorch-dev installs)"};
    auto entry = reinterpret_cast<af_torchscript_entry_fn>(
      dlsym(h, AF_TORCHSCRIPT_ENTRY));
    if (entry == nullptr)
      return {nullptr, q + " is not ActorFlow's TorchScript backend (no "
                         AF_TORCHSCRIPT_ENTRY ")"};
    const auto* b = entry();
    if (std::string(b->abi()) != AF_TORCHSCRIPT_ABI)
      return {nullptr, "the TorchScript backend " + q
                         + " belongs to another build (" + b->abi()
                         + ", this is " AF_TORCHSCRIPT_ABI ")"};
    return {b, {}};
  }
  return {nullptr, "its backend " AF_TORCHSCRIPT_PLUGIN_NAME
                   " is in none of: " + tried
                   + " (install actorflow again, or name the file in "
                     "ACTORFLOW_TORCHSCRIPT_PLUGIN)"};
}

#else

loaded load() {
  return {nullptr, "this actorflow was built without libtorch, which "
                   "TorchScript models need: install Debian's libtorch-dev "
                   "(scripts/setup does) and build again"};
}

#endif

// libtorch allocates a step's activations and gradients anew at each step
// and frees them at its end. With glibc's default thresholds those come
// from fresh mmaps or trimmed heap, and every step faults them in again:
// 5-6 million page faults an epoch of fmnist_resnet, which the process's
// threads take one at a time. Keeping freed memory in the heap (no mmap
// below 32 MiB, no trim below 1 GiB, the heap grown 64 MiB at a time)
// brings them to 0.25 million and the trainers' samples/s up by 13-29%
// (docs/benchmarks.md, "TorchScript models"). Left alone when the user
// tunes malloc through the environment.
void tune_malloc() {
  for (const char* v : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
                        "MALLOC_TOP_PAD_", "GLIBC_TUNABLES"})
    if (std::getenv(v) != nullptr)
      return;
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 64 << 20);
}

const loaded& plugin() {
  static const loaded l = [] {
    auto r = load();
    if (r.backend != nullptr)
      tune_malloc();
    return r;
  }();
  return l;
}

const detail::backend& backend_for(const std::string& file) {
  const auto& p = plugin();
  if (p.backend == nullptr)
    throw std::invalid_argument("cannot run the TorchScript model '" + file
                                + "': " + p.why);
  return *p.backend;
}

} // namespace

bool torchscript_available(std::string* why) {
  const auto& p = plugin();
  if (why != nullptr)
    *why = p.why;
  return p.backend != nullptr;
}

std::string torchscript_device_note() {
  const auto& p = plugin();
  return p.backend != nullptr ? p.backend->device_note() : p.why;
}

torchscript_info read_torchscript(const std::string& bytes,
                                  const std::string& file,
                                  const std::vector<std::string>& inputs) {
  return backend_for(file).read(bytes, file, inputs);
}

std::string torchscript_with_values(
  const std::string& bytes, const std::string& file,
  const std::map<std::string, std::vector<float>>& values) {
  return backend_for(file).with_values(bytes, file, values);
}

torchscript_model::torchscript_model(const training_spec& spec,
                                     gpu::device& dev, bool train)
  : impl_(backend_for(spec.torchscript ? spec.torchscript->file : "")
            .open(spec, dev, train)) {
}

torchscript_model::~torchscript_model() = default;

const std::vector<gpu::param_spec>& torchscript_model::params() const noexcept {
  return impl_->params();
}

gpu::device& torchscript_model::dev() noexcept {
  return impl_->dev();
}

gpu::darray& torchscript_model::value(size_t i) {
  return impl_->value(i);
}

gpu::darray& torchscript_model::grad(size_t i) {
  return impl_->grad(i);
}

void torchscript_model::set_local_rows(size_t i, int64_t rows) {
  impl_->set_local_rows(i, rows);
}

void torchscript_model::stage(const batch& b, host_batch& out, bool labels,
                              const std::string& reference) const {
  impl_->stage(b, out, labels, reference);
}

gpu::model::step_result torchscript_model::train_step(const host_batch& h) {
  return impl_->train_step(h);
}

gpu::model::step_result
torchscript_model::evaluate(const host_batch& h,
                            const std::vector<int64_t>& rows,
                            std::vector<float>& scores, int64_t& classes) {
  return impl_->evaluate(h, rows, scores, classes);
}

} // namespace af
