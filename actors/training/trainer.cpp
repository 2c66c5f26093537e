// trainer: trains the job's model on the batches it receives, as one worker
// of the parameter-server protocol: pull, forward and backward on its
// device, push. Declared in actors/training/trainer.hpp.
#include "actorflow/actors/training/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <caf/node_id.hpp>
#include <spdlog/spdlog.h>

#include "actorflow/actors/sinks/record_id_log.hpp"
#include "actorflow/actors/training/host_batch.hpp"
#include "actorflow/actors/training/step_slots.hpp"
#include "actorflow/actors/training/step_timing.hpp"
#include "actorflow/actors/training/torchscript_model.hpp"
#include "actorflow/actors/training/training_spec.hpp"
#include "actorflow/gpu/cpu_threads.hpp"
#include "actorflow/runtime/core/random.hpp"
#include "actorflow/runtime/ps/ps_client.hpp"
#include "actorflow/runtime/state/state_io.hpp"
#include "actorflow/runtime/topology/topology.hpp"

namespace af {

namespace {

struct trainer_config {
  std::string device = "cpu"; // "cpu", "cuda" or "cuda:N"
  std::vector<std::string> devices; // by replica, instead of device
  double topk_fraction = 0; // of each dense gradient pushed; 0: all of it
  int64_t log_every = 100; // steps; 0: never
  int64_t fail_at_step = 0; // fault injection (1-based); 0: never
  int64_t fail_replica = 0; // the replica that fails at fail_at_step
  bool prefetch = false; // pull the next step's parameters before pushing
  int64_t histogram_every = 500; // steps of replica 0; 0: never
  std::string record_ids; // file of the records trained; empty: off
  std::string record_id_field = "index"; // the batch field of their ids
  std::string precision = "fp32"; // "fp32", "tf32" or "bf16"
  int64_t timing_every = 10; // time every this many steps; 0: never
  int64_t concurrent_steps = 0; // replicas stepping at once per process; 0: all

  // The device replica `replica` trains on.
  const std::string& device_of(int64_t replica) const {
    if (devices.empty())
      return device;
    return devices[static_cast<size_t>(replica) % devices.size()];
  }
};

trainer_config trainer_config_of(const topology::Stage& s) {
  trainer_config c;
  auto& p = s.trainer();
  if (!p.device().empty())
    c.device = p.device();
  c.devices.assign(p.devices().begin(), p.devices().end());
  c.topk_fraction = p.topk_fraction();
  if (p.has_log_every_steps())
    c.log_every = p.log_every_steps();
  c.fail_at_step = p.fail_at_step();
  c.fail_replica = p.fail_replica();
  if (p.has_prefetch())
    c.prefetch = p.prefetch();
  if (p.has_histogram_every_steps())
    c.histogram_every = p.histogram_every_steps();
  c.record_ids = p.record_ids();
  if (!p.record_id_field().empty())
    c.record_id_field = p.record_id_field();
  if (!p.precision().empty())
    c.precision = p.precision();
  if (p.has_timing_every_steps())
    c.timing_every = p.timing_every_steps();
  c.concurrent_steps = p.concurrent_steps();
  return c;
}

// A batch staged on the device: the host copy (pinned on CUDA) and the
// device buffers the step reads.
struct slot {
  host_batch host;
  void* pinned = nullptr;
  size_t pinned_bytes = 0;
  gpu::darray x, labels;
  // An input in this GPU's memory (image_decode on it), read in place; held
  // until the slot is reused, when its step's gradients are downloaded.
  tensor in_place;
  std::vector<int64_t> ids; // record ids, when they are listed
  bool full = false;
};

class trainer : public stage_logic {
public:
  trainer(const stage_info& info, const topology::Stage& s)
    : info_(info), cfg_(trainer_config_of(s)) {
    if (!info.context || !info.context->topology)
      throw std::runtime_error("a trainer runs inside a job");
    spec_ = training_spec_of(*info.context->topology);
    dev_ = gpu::make_device(cfg_.device_of(info.replica));
    gpu::precision prec{};
    gpu::parse_precision(cfg_.precision, prec); // check() accepted it
    dev_->set_precision(prec);
    if (!dev_->is_cuda()) // its share of the cores for BLAS threads
      blas_ = std::make_unique<gpu::blas_share>();
    if (spec_.torchscript)
      torch_ = std::make_unique<torchscript_model>(spec_, *dev_, true);
    else
      model_ = std::make_unique<gpu::model>(spec_.model, *dev_);
    client_ = std::make_unique<ps_client>(*info.context->system,
                                          info.context->service(ps_service),
                                          spec_.params, info.replica,
                                          info.context->coordinator);
    client_->set_wire(spec_.wire);
    // The stage's replicas in this process share the slots (the job's
    // coordinator tells this job's stage from another job's).
    if (cfg_.concurrent_steps > 0) {
      auto& job = info.context->coordinator;
      auto key = job ? caf::to_string(job.node()) + "#"
                         + std::to_string(job.id())
                     : std::string{};
      step_slots_ = step_slots::shared(key + "/" + info.name,
                                       cfg_.concurrent_steps);
    }
    // Registered before any data flows, so that the shards count this
    // worker from the first clock on (and notice if it dies early). A
    // trainer respawned for a lost one goes on with that worker's clock
    // (its steps are the worker's; its record ids follow the lost one's).
    auto joined = client_->join();
    if (!cfg_.record_ids.empty())
      ids_ = std::make_unique<record_id_log>(cfg_.record_ids,
                                             cfg_.record_id_field,
                                             info.replica, info.label());
    steps_ = joined.clock;
    respawned_at_ = joined.own;
    spdlog::debug("{}: training on {} ({})", info_.label(), dev_->name(),
                  cfg_.precision);
  }

  ~trainer() override {
    for (auto& s : slots_)
      if (s.pinned != nullptr)
        dev_->deallocate_host(s.pinned);
  }

  void process(batch&& item, emitter&) override {
    follow_lost_ids();
    auto now = clock_type::now();
    if (last_end_ != clock_type::time_point{})
      wait_data_s_ += std::chrono::duration<double>(now - last_end_).count();
    if (first_ == clock_type::time_point{}) {
      first_ = now;
      // (At the first batch every trainer of this process has its share.)
      if (blas_) {
        spdlog::info("{}: on the cpu: {}", info_.label(),
                     gpu::blas_description());
        if (auto w = gpu::blas_core_warning(); !w.empty())
          spdlog::warn("{}: {}", info_.label(), w);
      }
    }
    auto& next = slots_[next_];
    auto& prev = slots_[1 - next_];
    // Every timing_every-th step is timed, from this batch's arrival to
    // the end of the step it triggers.
    timing_now_ = prev.full && cfg_.timing_every > 0
                  && (steps_ + 1) % static_cast<uint64_t>(cfg_.timing_every)
                       == 0;
    if (timing_now_)
      dev_->set_timing(true);
    host_timed(timing_now_, timing_.prepare, [&] {
      if (torch_) {
        torch_->stage(item, next.host, false);
      } else {
        next.in_place = on_this_gpu(item);
        to_host(spec_, item, next.host, "", next.in_place.byte_size() > 0);
        stage(next);
      }
      ++staged_;
      in_place_ += next.host.input_in_place ? 1 : 0;
      if (ids_)
        ids_->take(item, next.ids);
    });
    // The batch staged before this one is on its way to the device: train
    // on it while this one's copy is queued.
    if (prev.full)
      step(prev, &next);
    else
      upload(next);
    next.full = true;
    next_ = 1 - next_;
    last_end_ = clock_type::now();
    if (timing_now_) {
      timing_.step += std::chrono::duration<double>(last_end_ - now).count();
      timing_.add(dev_->take_times());
      dev_->set_timing(false);
      ++timing_.steps;
      timing_now_ = false;
    }
  }

  void finish(emitter&) override {
    follow_lost_ids();
    auto& last = slots_[1 - next_];
    if (last.full)
      step(last, nullptr);
    account(client_->flush());
    client_->leave();
    if (ids_)
      ids_->close();
    spdlog::info("{}: {} steps, {} samples, loss {:.4f}, {:.0f} samples/s",
                 info_.label(), steps_, samples_, mean_loss(),
                 samples_per_s());
  }

  // A checkpoint cut: the staged batch is trained and pushed, the pushes
  // acknowledged, and the worker paused at the shards so that a clock
  // waiting for it completes without it (other trainers may have been
  // given more batches before the cut).
  uint64_t quiesce() override {
    train_held();
    client_->pause();
    return steps_;
  }

  // Back into the clocks with the step count it had: a trainer that was
  // given fewer batches before the cut is simply behind, as it would be
  // without the checkpoint.
  void resume() override { client_->join(); }

  // Not done: the staged batch, and the one whose push the shards have not
  // acknowledged (a batch is done once its gradients are applied). With
  // several trainers their producers keep both until then, and send them
  // to another trainer if this one is lost (stage_type::resend_unfinished).
  size_t held() const override {
    return (slots_[1 - next_].full ? 1 : 0)
           + (client_->push_unacknowledged() ? 1 : 0);
  }

  size_t most_held() const override { return 2; }

  // (Not called while held() <= most_held(): the runtime's safety net.)
  void release(emitter&) override { train_held(); }

  std::string snapshot() const override {
    return save_state("trainer/1", steps_, samples_, skipped_, epoch_,
                      epoch_loss_, epoch_samples_);
  }

  void restore(const std::string& state) override {
    load_state(state, "trainer/1", steps_, samples_, skipped_, epoch_,
               epoch_loss_, epoch_samples_);
    resumed_samples_ = samples_;
    respawned_at_ = 0; // the checkpoint's step count decides
    if (ids_)
      ids_->restore(steps_);
  }

  void metrics(std::vector<metric>& out) const override {
    out.push_back({metric_name::epoch, static_cast<double>(epoch_)});
    out.push_back({metric_name::step, static_cast<double>(steps_)});
    out.push_back({metric_name::samples, static_cast<double>(samples_)});
    out.push_back(
      {metric_name::samples_resumed, static_cast<double>(resumed_samples_)});
    out.push_back({metric_name::loss, mean_loss()});
    out.push_back({metric_name::samples_per_s, samples_per_s()});
    out.push_back({metric_name::staleness_mean,
                   acks_ ? staleness_sum_ / static_cast<double>(acks_) : 0.0});
    out.push_back(
      {metric_name::staleness_max, static_cast<double>(staleness_max_)});
    out.push_back({metric_name::wait_data_s, wait_data_s_});
    out.push_back({metric_name::wait_params_s, wait_params_s_});
    if (step_slots_)
      out.push_back({metric_name::wait_slot_s, wait_slot_s_});
    out.push_back({metric_name::skipped_steps, static_cast<double>(skipped_)});
    out.push_back({metric_name::network_bytes,
                   static_cast<double>(client_->network_bytes())});
    timing_metrics(timing_, staged_, in_place_, out);
  }

  void take_histograms(std::vector<histogram_summary>& out) override {
    for (auto& h : histograms_)
      out.push_back(std::move(h));
    histograms_.clear();
  }

private:
  // Trains the staged batch and takes the last push's acknowledgements:
  // nothing is held (held() == 0) afterwards.
  void train_held() {
    auto& last = slots_[1 - next_];
    if (last.full)
      step(last, nullptr);
    if (prefetched_)
      take_prefetched();
    account(client_->flush());
  }

  // The input field, when it is f32 in this trainer's GPU's memory;
  // otherwise an empty tensor (the input is copied to the host, where it
  // may have to be fetched from another GPU first).
  tensor on_this_gpu(const batch& item) const {
    auto* x = item.find(spec_.input);
    int ordinal = -1;
    if (x != nullptr && x->type() == dtype::f32 && dev_->is_cuda()
        && x->device_data(&ordinal) != nullptr && ordinal == dev_->ordinal())
      return *x;
    return {};
  }

  // Copies the host batch into pinned memory (device buffers sized too).
  // An input in place stays where it is; one that needs transposing gets
  // a device buffer for the result.
  void stage(slot& s) {
    auto in = s.host.input_bytes(); // 0 when in place
    auto lb = s.host.label_bytes();
    if (s.pinned_bytes < in + lb) {
      if (s.pinned != nullptr)
        dev_->deallocate_host(s.pinned);
      s.pinned = dev_->allocate_host(in + lb);
      s.pinned_bytes = in + lb;
    }
    if (in > 0)
      std::memcpy(s.pinned, s.host.input(), in);
    if (lb > 0)
      std::memcpy(static_cast<char*>(s.pinned) + in, s.host.labels(), lb);
    if (!s.host.input_in_place)
      s.x.reserve(*dev_, in);
    else if (s.host.to_chw)
      s.x.reserve(*dev_, s.in_place.byte_size());
    s.labels.reserve(*dev_, lb);
  }

  // The model's input of a staged batch: the uploaded copy, or the input
  // in place (transposed into the slot's buffer first when it must be).
  const void* input_of(slot& s) {
    if (!s.host.input_in_place)
      return s.x.get();
    auto* src = static_cast<const float*>(s.in_place.device_data());
    if (!s.host.to_chw)
      return src;
    dev_->hwc_to_chw(src, s.x.f32(), s.host.n,
                     static_cast<int>(s.host.height),
                     static_cast<int>(s.host.width),
                     static_cast<int>(s.host.channels));
    return s.x.get();
  }

  void upload(slot& s) {
    if (torch_) // on the CPU, read where it is
      return;
    auto in = s.host.input_bytes();
    dev_->upload_async(s.x.get(), s.pinned, in);
    dev_->upload_async(s.labels.get(), static_cast<char*>(s.pinned) + in,
                       s.host.label_bytes());
  }

  // The pull sent ahead (with the last push, or before it with prefetch):
  // its parameters into the model; the time blocked counts as waiting.
  void take_prefetched() {
    auto begin = clock_type::now();
    client_->pull_wait(store());
    wait_params_s_ += seconds_since(begin);
    prefetched_ = false;
  }

  void step(slot& cur, slot* next) {
    auto clock = steps_;
    // With concurrent_steps: a slot from before the pull to the end of the
    // step (the push sent), or until the step throws.
    step_slots::lease turn;
    if (step_slots_) {
      host_timed(timing_now_, timing_.slot_wait, [&] {
        auto begin = clock_type::now();
        turn = step_slots_->acquire();
        wait_slot_s_ += seconds_since(begin);
      });
    }
    host_timed(timing_now_, timing_.pull, [&] {
      if (prefetched_)
        take_prefetched();
      else
        wait_params_s_ += client_->pull(store(), clock, cur.host.rows);
    });
    // cur's data is on the device
    host_timed(timing_now_, timing_.input_wait, [&] { dev_->wait_uploads(); });
    if (next != nullptr)
      upload(*next); // overlaps the step below on CUDA
    // prefetch (unbounded staleness only): the next step's parameters are
    // asked for now, so the shards answer while this step computes and
    // apply its push while the next one does; that step then reads
    // parameters one update older. Otherwise the pull follows the push
    // (read-my-writes). check() refuses prefetch with concurrent_steps.
    if (next != nullptr && !spec_.staleness && cfg_.prefetch) {
      client_->pull_async(clock + 1, next->host.rows);
      prefetched_ = true;
    }
    auto seed = mix64(mix64(info_.seed ^ 0x7472616eULL) ^ info_.replica)
                ^ mix64(clock);
    auto r = host_timed(timing_now_, timing_.compute, [&] {
      dev_->compute_begin();
      auto out = torch_ ? torch_->train_step(cur.host)
                        : model_->train_step(input_of(cur), cur.labels.get(),
                                             cur.host.n, seed);
      dev_->compute_end();
      return out;
    });
    ++steps_;
    if (info_.replica == 0 && cfg_.histogram_every > 0
        && steps_ % static_cast<uint64_t>(cfg_.histogram_every) == 0) {
      // Its downloads are not the step's (their host time lands in gaps).
      dev_->set_timing(false);
      summarize_variables(cur.host.n, cur.host.rows.size());
      dev_->set_timing(timing_now_);
    }
    if (cfg_.fail_at_step > 0 && cfg_.fail_replica == info_.replica
        && static_cast<int64_t>(steps_) == cfg_.fail_at_step)
      throw std::runtime_error("fault injection: trainer fails at step "
                               + std::to_string(steps_));
    // Without prefetch the next step's pull follows this push: it goes
    // with it (one request per shard each way instead of two). Not under a
    // staleness bound: a pull the bound holds back is asked again every
    // ps_client::impl::patience, and with it would go the whole push (and
    // the retry's duplicate acknowledgement would hide the staleness). Nor
    // with concurrent_steps: the next pull waits for its slot.
    auto pushed = host_timed(timing_now_, timing_.push, [&] {
      if (next != nullptr && !prefetched_ && !spec_.staleness && !step_slots_) {
        prefetched_ = true;
        return client_->push_then_pull(store(), steps_,
                                       static_cast<uint64_t>(cur.host.n),
                                       cur.host.rows, cfg_.topk_fraction,
                                       steps_, next->host.rows);
      }
      return client_->push(store(), steps_, static_cast<uint64_t>(cur.host.n),
                           cur.host.rows, cfg_.topk_fraction);
    });
    cur.full = false;
    account(pushed);
    if (!pushed.nonfinite.empty()) {
      // A TorchScript module's loss is its own: say when it is the cause.
      auto what = !spec_.torchscript || std::isfinite(r.loss_sum)
                    ? "gradient of variable '" + pushed.nonfinite + "'"
                    : "loss of '" + spec_.torchscript->file
                        + "' (and so the gradient of variable '"
                        + pushed.nonfinite + "')";
      if (spec_.fail_on_nonfinite)
        throw input_error(what + " has NaN or Inf at step "
                          + std::to_string(steps_));
      if (skipped_++ < 10)
        spdlog::warn("{}: {} has NaN or Inf at step {}; step skipped ({} so "
                     "far)",
                     info_.label(), what, steps_, skipped_);
      return;
    }
    // Trained: its gradients are pushed (a skipped step trained nothing).
    if (ids_)
      ids_->write(steps_, cur.host.epoch, cur.ids);
    if (cur.host.epoch > epoch_ || samples_ == 0) {
      epoch_ = cur.host.epoch;
      epoch_loss_ = 0;
      epoch_samples_ = 0;
    }
    // (A batch of an earlier epoch, sent again from a lost trainer, does
    // not count in this epoch's loss.)
    if (cur.host.epoch == epoch_) {
      epoch_loss_ += r.loss_sum;
      epoch_samples_ += static_cast<uint64_t>(cur.host.n);
    }
    samples_ += static_cast<uint64_t>(cur.host.n);
    if (cfg_.log_every > 0
        && steps_ % static_cast<uint64_t>(cfg_.log_every) == 0)
      spdlog::info("{}: epoch {} step {} loss {:.4f} {:.0f} samples/s "
                   "staleness {:.2f}",
                   info_.label(), epoch_ + 1, steps_, mean_loss(),
                   samples_per_s(),
                   staleness_sum_
                     / static_cast<double>(std::max<uint64_t>(1, acks_)));
  }

  // Every variable's weights (as pulled for this step) and gradient (the
  // batch mean), at the global step of those weights. Before the push:
  // top-k sparsification changes the gradient buffers.
  void summarize_variables(int64_t samples, size_t local_rows) {
    auto step = static_cast<int64_t>(client_->read_version());
    auto& params = store().params();
    for (size_t i = 0; i < params.size(); ++i) {
      auto& p = params[i];
      auto n = static_cast<size_t>(p.size());
      if (p.sparse) // the rows this step touched
        n = std::min(local_rows * static_cast<size_t>(p.row_size()),
                     store().value(i).bytes() / sizeof(float));
      host_values_.resize(n);
      dev_->download(host_values_.data(), store().value(i).get(),
                     n * sizeof(float));
      histograms_.push_back(
        summarize("weights/" + p.name, step, host_values_.data(), n));
      dev_->download(host_values_.data(), store().grad(i).get(),
                     n * sizeof(float));
      histograms_.push_back(
        summarize("gradients/" + p.name, step, host_values_.data(), n,
                  samples > 0 ? 1.0 / static_cast<double>(samples) : 1.0));
    }
  }

  // A trainer respawned for a lost one (its worker id had a clock > 0 at
  // the shards, and no checkpoint's state came): its record ids go on
  // after the lost one's, which are cut after that clock (the pushes of
  // the steps after it were lost, and their batches come again).
  void follow_lost_ids() {
    if (respawned_at_ == 0)
      return;
    if (ids_)
      ids_->restore(respawned_at_, "the shards' clock of this worker");
    respawned_at_ = 0;
  }

  gpu::param_store& store() {
    if (torch_)
      return *torch_;
    return *model_;
  }

  // Staleness comes with the acknowledgements of the push before.
  void account(const ps_client::push_result& r) {
    if (!r.acknowledged)
      return;
    ++acks_;
    staleness_sum_ += r.staleness_mean;
    staleness_max_ = std::max(staleness_max_, r.staleness_max);
  }

  double mean_loss() const {
    return epoch_samples_ ? epoch_loss_ / static_cast<double>(epoch_samples_)
                          : 0.0;
  }

  double samples_per_s() const {
    if (first_ == clock_type::time_point{})
      return 0;
    // Those trained in this run: a resumed trainer's restored count is of
    // the run before.
    auto secs = seconds_since(first_);
    return secs > 0 ? static_cast<double>(samples_ - resumed_samples_) / secs
                    : 0.0;
  }

  stage_info info_;
  trainer_config cfg_;
  training_spec spec_;
  std::unique_ptr<gpu::blas_share> blas_; // on the CPU device
  std::unique_ptr<gpu::device> dev_;
  std::unique_ptr<gpu::model> model_; // the built-in layers, or
  std::unique_ptr<torchscript_model> torch_; // a TorchScript module
  std::unique_ptr<ps_client> client_;
  std::unique_ptr<record_id_log> ids_; // null: record ids not listed
  std::shared_ptr<step_slots> step_slots_; // null: concurrent_steps unset
  slot slots_[2];
  uint64_t staged_ = 0, in_place_ = 0; // batches, and those read in place
  int next_ = 0;
  bool prefetched_ = false; // a pull for the next step is outstanding
  uint64_t steps_ = 0, samples_ = 0, skipped_ = 0, epoch_ = 0;
  uint64_t respawned_at_ = 0; // the lost worker's clock, until follow_lost_ids
  uint64_t resumed_samples_ = 0; // restored from a checkpoint
  double epoch_loss_ = 0;
  uint64_t epoch_samples_ = 0;
  double staleness_sum_ = 0;
  uint64_t acks_ = 0; // acknowledged pushes
  uint64_t staleness_max_ = 0;
  double wait_data_s_ = 0, wait_params_s_ = 0, wait_slot_s_ = 0;
  bool timing_now_ = false; // this step is timed
  step_timing timing_;
  clock_type::time_point first_{}, last_end_{};
  std::vector<histogram_summary> histograms_; // not yet reported
  std::vector<float> host_values_;
};

std::string check_trainer(const topology::Stage& s) {
  if (s.config_case() != topology::Stage::kTrainer
      && s.config_case() != topology::Stage::CONFIG_NOT_SET)
    return "expects a trainer { ... } block";
  auto c = trainer_config_of(s);
  if (!s.trainer().device().empty() && !c.devices.empty())
    return "set device or devices, not both (devices: one per replica, in "
           "turn)";
  std::vector<std::string> all = c.devices;
  if (all.empty())
    all.push_back(c.device);
  gpu::precision prec{};
  if (!gpu::parse_precision(c.precision, prec))
    return "precision must be \"fp32\", \"tf32\" or \"bf16\", got \""
           + c.precision + "\"";
  for (auto& d : all) {
    if (!valid_device_spec(d))
      return std::string(c.devices.empty() ? "device" : "devices")
             + " must be \"cpu\", \"cuda\" or \"cuda:N\", got \"" + d + "\"";
    if (prec != gpu::precision::fp32 && d == "cpu")
      return "precision \"" + c.precision
             + "\" needs a CUDA device (device: \"cuda\"): the cpu device "
               "computes in fp32 only";
  }
  if (c.concurrent_steps < 0)
    return "concurrent_steps must be >= 0 (0: no bound), got "
           + std::to_string(c.concurrent_steps);
  if (c.concurrent_steps > 0 && c.prefetch)
    return "prefetch sends a step's pull before the step has a slot: set "
           "concurrent_steps or prefetch, not both";
  if (c.timing_every < 0)
    return "timing_every_steps must be >= 0 (0: no step timing)";
  if (!(c.topk_fraction >= 0 && c.topk_fraction < 1))
    return "topk_fraction must be in [0, 1) (0: push every gradient)";
  if (c.log_every < 0)
    return "log_every_steps must be >= 0";
  if (c.histogram_every < 0)
    return "histogram_every_steps must be >= 0 (0: no histograms)";
  if (!c.record_ids.empty())
    return record_id_log::check(c.record_ids, max_replicas_of(s));
  return {};
}

} // namespace

stage_type trainer_type() {
  stage_type t;
  t.name = "trainer";
  t.kind = stage_kind::sink;
  t.description = "trains the topology's model against the parameter "
                  "servers (pull, forward/backward, push)";
  t.blocking = true; // BLAS/GPU steps and blocking pulls
  t.replicas_may_fail = true;
  t.resend_unfinished = true;
  t.check = check_trainer;
  t.make = [](const stage_info& info, const topology::Stage& s) {
    return std::make_shared<trainer>(info, s);
  };
  return t;
}

} // namespace af
