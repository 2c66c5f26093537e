// embed_example: a CAF application of its own that runs an ActorFlow
// pipeline (docs/embedding.md walks through it).
//
//   embed_example FASHION_MNIST_DIR [--epochs N]
//
// FASHION_MNIST_DIR holds the IDX files (Debian: dataset-fashion-mnist;
// `dpkg -L dataset-fashion-mnist` shows where). The pipeline, built in code:
//
//   train:   idx_source -> standardize* -> shuffle -> batcher -> trainer <-> ps
//   test:    idx_source -> standardize* -> batcher -> evaluator
//   preview: idx_source -> standardize* -> outlet "preview" -> this app's actor
//
// *standardize is this application's own stage type: it turns u8 images
// [n, 28, 28] into f32 [n, 784] with the data set's mean and standard
// deviation. The app's actor receives the preview's batches (and checks
// what the stage made), the job's progress and its end as messages.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>

#include <actorflow/actors/actorflow.hpp>

namespace {

// ---- the custom stage ------------------------------------------------------

af::map_fn make_standardize(const af::stage_info&,
                            const af::stage_options& opts) {
  auto mean = opts.get_double("mean", 0.2860);
  auto stddev = opts.get_double("std", 0.3530);
  if (stddev <= 0)
    throw std::invalid_argument("option 'std' must be > 0");
  return [mean, stddev](af::batch&& b) {
    auto& image = b.at("image");
    if (image.type() != af::dtype::u8 || image.shape().size() != 3)
      throw af::input_error("standardize: 'image' must be u8 [n, rows, cols]");
    auto n = image.shape()[0];
    auto pixels = image.shape()[1] * image.shape()[2];
    auto out = af::tensor::allocate(af::dtype::f32, {n, pixels});
    auto* src = image.data_as<uint8_t>();
    auto* dst = out.mutable_data_as<float>();
    for (int64_t i = 0; i < n * pixels; ++i)
      dst[i] = static_cast<float>((src[i] / 255.0 - mean) / stddev);
    b.set("image", std::move(out));
    return std::move(b);
  };
}

// ---- the pipeline, in code -------------------------------------------------

void add_branch_head(af::pipeline& p, const std::string& prefix,
                     const std::string& dir, const std::string& split,
                     int64_t epochs) {
  auto& read = p.add(prefix + "read", "idx_source");
  read.mutable_idx_source()->set_images(dir + "/" + split
                                        + "-images-idx3-ubyte.gz");
  read.mutable_idx_source()->set_labels(dir + "/" + split
                                        + "-labels-idx1-ubyte.gz");
  read.mutable_idx_source()->set_epochs(epochs);
  p.add(prefix + "standardize", "standardize", {prefix + "read"});
}

af::pipeline make_pipeline(const std::string& dir, int64_t epochs) {
  af::pipeline p{"embed-example"};
  p.runtime().set_seed(1);
  // Stages report every 0.2 s (default 0.5 s): progress for a short job.
  p.runtime().set_metrics_interval_s(0.2);
  auto& model = *p.training().mutable_model();
  model.set_input("image");
  model.add_input_shape(784);
  model.set_label("label");
  for (auto units : {256, 128, 10}) {
    auto* dense = model.add_layer();
    dense->set_type("dense");
    dense->set_units(units);
    if (units != 10)
      model.add_layer()->set_type("relu");
  }
  model.set_loss("softmax_cross_entropy");
  p.training().mutable_optimizer()->set_type("adam");
  p.training().mutable_optimizer()->set_learning_rate(0.001);
  p.training().mutable_ps()->set_shards(1);

  add_branch_head(p, "", dir, "train", epochs);
  p.add("shuffle", "shuffle", {"standardize"})
    .mutable_shuffle()
    ->set_buffer_size(10000);
  p.add("batch", "batcher", {"shuffle"}).mutable_batcher()->set_batch_size(64);
  auto& train = p.add("train", "trainer", {"batch"});
  train.mutable_input(0)->set_window(4);
  train.mutable_trainer()->set_log_every_steps(0);

  add_branch_head(p, "test_", dir, "t10k", 1);
  p.add("test_batch", "batcher", {"test_standardize"})
    .mutable_batcher()
    ->set_batch_size(1000);
  p.add("evaluate", "evaluator", {"test_batch"});

  add_branch_head(p, "preview_", dir, "t10k", 1);
  p.add("preview", "outlet", {"preview_standardize"});
  return p;
}

// ---- the application's actor ----------------------------------------------

double metric_of(const af::job_progress& p, const std::string& name) {
  double value = NAN;
  for (auto& s : p.stages)
    for (auto& m : s.metrics)
      if (m.name == name)
        value = m.value;
  return value;
}

// Receives the preview's batches, the job's progress and its end.
caf::behavior app_actor(caf::event_based_actor* self) {
  struct stats {
    int64_t batches = 0;
    int64_t records = 0;
    double sum = 0;
    double sum_sq = 0;
    int64_t values = 0;
  };
  auto st = std::make_shared<stats>();
  return {
    [=](af::outlet_atom, const std::string&, const af::batch& b) {
      // Returning (nothing) answers the request: the outlet's credit.
      auto& image = b.at("image");
      auto* x = image.data_as<float>();
      for (int64_t i = 0; i < image.elements(); ++i) {
        st->sum += x[i];
        st->sum_sq += double{x[i]} * x[i];
      }
      st->values += image.elements();
      st->records += b.records();
      ++st->batches;
    },
    [=](af::job_progress_atom, const af::job_progress& p) {
      // records: what reached the sinks (trainer, evaluator, outlet).
      auto loss = metric_of(p, "loss");
      std::printf("progress: %.1f s, %llu records done, loss %s\n",
                  p.elapsed_s, static_cast<unsigned long long>(p.records),
                  std::isnan(loss) ? "n/a" : std::to_string(loss).c_str());
      std::fflush(stdout);
    },
    [=](af::job_done_atom, const af::run_result& r) {
      auto mean = st->sum / static_cast<double>(st->values);
      auto var = st->sum_sq / static_cast<double>(st->values) - mean * mean;
      std::printf("preview: %lld batches, %lld records, standardized pixels: "
                  "mean %.4f, std %.4f\n",
                  static_cast<long long>(st->batches),
                  static_cast<long long>(st->records), mean, std::sqrt(var));
      if (r.ok)
        std::printf("job done: test accuracy %.4f, test loss %.4f\n",
                    metric_of(r.final, "test_accuracy"),
                    metric_of(r.final, "test_loss"));
      else
        std::printf("job failed: %s\n", r.error.c_str());
      std::fflush(stdout);
      self->quit();
    },
  };
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string{argv[1]} == "--help") {
    std::fprintf(stderr,
                 "usage: embed_example FASHION_MNIST_DIR [--epochs N]\n"
                 "  FASHION_MNIST_DIR: the folder of the IDX files "
                 "(dpkg -L dataset-fashion-mnist)\n");
    return argc < 2 ? 2 : 0;
  }
  std::string dir = argv[1];
  int64_t epochs = 1;
  if (argc == 4 && std::string{argv[2]} == "--epochs")
    epochs = std::atoll(argv[3]);
  if (epochs < 1 || (argc != 2 && argc != 4)) {
    std::fprintf(stderr, "embed_example: bad arguments (--help)\n");
    return 2;
  }
  if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz")) {
    std::fprintf(stderr, "embed_example: %s/train-images-idx3-ubyte.gz: no "
                 "such file\n", dir.c_str());
    return 2;
  }
  std::printf("ActorFlow %s (CMake package %s)\n", af::version,
              EMBED_PACKAGE_VERSION);

  // 1. The application's own actor system, with ActorFlow's message types.
  caf::actor_system_config cfg;
  af::add_message_types(cfg);
  af::apply(af::engine_options{}, cfg);
  caf::actor_system sys{cfg};

  // 2. Stage types: the built-in ones and this application's own.
  af::registry reg;
  af::register_builtin_stages(reg);
  reg.add(af::map_stage("standardize",
                        "u8 images -> f32 [n, pixels], (x/255 - mean) / std",
                        {"mean", "std"}, make_standardize));

  // 3. The pipeline, validated like a topology file.
  af::loaded_topology topo;
  try {
    topo = make_pipeline(dir, epochs).build(reg);
  } catch (const af::topology_invalid& ex) {
    std::fprintf(stderr, "embed_example: invalid pipeline:\n%s\n", ex.what());
    return 1;
  }

  // 4. Run it; this application's actor hears about everything.
  auto app = sys.spawn(app_actor);
  af::job_options opts;
  opts.listener = app;
  opts.outlets["preview"] = app;
  opts.progress_interval = std::chrono::milliseconds{200};
  try {
    auto job = af::job::start(sys, topo, reg, opts);
    auto result = job.wait();
    caf::scoped_actor self{sys};
    self->wait_for(app); // it quits after the job's end
    return result.ok ? 0 : 1;
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "embed_example: %s\n", ex.what());
    caf::anon_send_exit(app, caf::exit_reason::user_shutdown);
    return 1;
  }
}
