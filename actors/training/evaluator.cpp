// evaluator: measures the job's model on a held-out split. Declared in
// actors/training/evaluator.hpp.
#include "actorflow/actors/training/evaluator.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <set>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "actorflow/actors/training/host_batch.hpp"
#include "actorflow/actors/training/torchscript_model.hpp"
#include "actorflow/actors/training/training_spec.hpp"
#include "actorflow/runtime/ps/ps_client.hpp"
#include "actorflow/runtime/topology/topology.hpp"

namespace af {

double roc_auc(const std::vector<float>& scores,
               const std::vector<float>& labels) {
  auto n = scores.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  // Mann-Whitney U: the rank sum of the positives, ties given their mean
  // rank.
  double positives = 0, rank_sum = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && scores[order[j]] == scores[order[i]])
      ++j;
    double mean_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;
    for (size_t k = i; k < j; ++k)
      if (labels[order[k]] > 0.5f) {
        positives += 1;
        rank_sum += mean_rank;
      }
    i = j;
  }
  double negatives = static_cast<double>(n) - positives;
  if (positives == 0 || negatives == 0)
    return 0.5;
  return (rank_sum - positives * (positives + 1) / 2)
         / (positives * negatives);
}

namespace {

struct evaluator_config {
  int64_t every_steps = 0; // pushes applied between evaluations; 0: at the end
  std::string device = "cpu"; // as the trainer's
  std::string reference; // f32 field of reference scores; empty: none
  std::string predictions; // file for the final predictions; empty: none
};

evaluator_config evaluator_config_of(const topology::Stage& s) {
  evaluator_config c;
  auto& p = s.evaluator();
  c.every_steps = p.every_steps();
  if (!p.device().empty())
    c.device = p.device();
  c.reference = p.reference_score();
  c.predictions = p.predictions();
  return c;
}

class evaluator : public stage_logic {
public:
  evaluator(const stage_info& info, const topology::Stage& s)
    : info_(info), cfg_(evaluator_config_of(s)) {
    if (!info.context || !info.context->topology)
      throw std::runtime_error("an evaluator runs inside a job");
    spec_ = training_spec_of(*info.context->topology);
    dev_ = gpu::make_device(cfg_.device);
    if (spec_.torchscript)
      torch_ = std::make_unique<torchscript_model>(spec_, *dev_, false);
    else
      model_ = std::make_unique<gpu::model>(spec_.model, *dev_);
    classes_ = spec_.softmax();
    if (!cfg_.predictions.empty()) {
      // Fail now, not after training, when the file cannot be written.
      std::ofstream probe{cfg_.predictions + ".tmp"};
      if (!probe)
        throw std::runtime_error("evaluator.predictions: cannot write '"
                                 + cfg_.predictions + ".tmp'");
    }
    client_ = std::make_unique<ps_client>(*info.context->system,
                                          info.context->service(ps_service),
                                          spec_.params, ps_observer,
                                          info.context->coordinator);
  }

  void process(batch&& item, emitter&) override {
    host_batch h;
    if (torch_)
      torch_->stage(item, h, true, cfg_.reference);
    else
      to_host(spec_, item, h, cfg_.reference);
    rows_.insert(h.rows.begin(), h.rows.end());
    records_ += static_cast<uint64_t>(h.n);
    test_.push_back(std::move(h));
  }

  void finish(emitter& out) override {
    if (test_.empty())
      throw std::runtime_error("the evaluator's input (the held-out split) "
                               "had no records");
    if (!cfg_.reference.empty()) {
      std::vector<float> scores, labels;
      for (auto& h : test_) {
        scores.insert(scores.end(), h.reference.begin(), h.reference.end());
        labels.insert(labels.end(), h.binary.begin(), h.binary.end());
      }
      reference_auc_ = roc_auc(scores, labels);
    }
    auto every = static_cast<uint64_t>(cfg_.every_steps);
    uint64_t next = every > 0 ? every : std::numeric_limits<uint64_t>::max();
    for (;;) {
      auto progress = client_->wait(next);
      evaluate(progress.steps, progress.finished);
      // The replica is inside this call until training ends: its stats
      // report would wait until then, and with it every evaluation but
      // the last (progress line, TensorBoard).
      out.report_metrics();
      if (progress.finished)
        break;
      next = (progress.steps / every + 1) * every;
    }
  }

  void take_scalars(std::vector<scalar_event>& out) override {
    for (auto& e : events_)
      out.push_back(std::move(e));
    events_.clear();
  }

  void metrics(std::vector<metric>& out) const override {
    out.push_back({metric_name::network_bytes,
                   static_cast<double>(client_->network_bytes())});
    if (evaluations_ == 0)
      return;
    out.push_back({metric_name::eval_step, static_cast<double>(step_)});
    out.push_back({metric_name::test_loss, loss_});
    if (classes_)
      out.push_back({metric_name::test_accuracy, accuracy_});
    else
      out.push_back({metric_name::test_auc, auc_});
    if (!cfg_.reference.empty())
      out.push_back({metric_name::reference_auc, reference_auc_});
    out.push_back(
      {metric_name::evaluations, static_cast<double>(evaluations_)});
  }

private:
  void evaluate(uint64_t step, bool final) {
    // Training ended at the step just evaluated: the same parameters give
    // the same results; only say that they are the final ones.
    if (final && evaluations_ > 0 && step == step_) {
      log(true);
      write_predictions();
      return;
    }
    std::vector<int64_t> rows(rows_.begin(), rows_.end());
    if (torch_) {
      client_->pull(*torch_, 0, rows);
      evaluate_torchscript(rows);
    } else {
      client_->pull(*model_, 0, rows);
      evaluate_layers(rows);
    }
    step_ = step;
    ++evaluations_;
    auto at = static_cast<int64_t>(step);
    events_.push_back({metric_name::test_loss, at, loss_});
    if (classes_)
      events_.push_back({metric_name::test_accuracy, at, accuracy_});
    else
      events_.push_back({metric_name::test_auc, at, auc_});
    log(final);
    if (final)
      write_predictions();
  }

  // evaluator.predictions: the last evaluation's predictions, a line per
  // record, written to a temporary file and renamed.
  void write_predictions() const {
    if (cfg_.predictions.empty())
      return;
    auto tmp = cfg_.predictions + ".tmp";
    if (width_ == 0) {
      std::remove(tmp.c_str());
      spdlog::warn("{}: no predictions to write to '{}': forward of '{}' "
                   "returns the loss only (return (loss, predictions))",
                   info_.label(), cfg_.predictions,
                   spec_.torchscript ? spec_.torchscript->file : "");
      return;
    }
    {
      std::ofstream out{tmp};
      for (size_t i = 0; i < predictions_.size(); ++i)
        out << fmt::format("{:.9g}", predictions_[i])
            << ((i + 1) % width_ == 0 ? '\n' : ' ');
      if (!out.flush())
        throw std::runtime_error("evaluator.predictions: cannot write '"
                                 + tmp + "'");
    }
    std::error_code ec;
    std::filesystem::rename(tmp, cfg_.predictions, ec);
    if (ec)
      throw std::runtime_error("evaluator.predictions: cannot rename '" + tmp
                               + "' to '" + cfg_.predictions
                               + "': " + ec.message());
    spdlog::info("{}: predictions of {} records ({} per record) written to "
                 "'{}'",
                 info_.label(), predictions_.size() / width_, width_,
                 cfg_.predictions);
  }

  // A TorchScript module: its predictions' shape says what they are
  // ([n, classes] scores: accuracy; [n] scores: AUC).
  void evaluate_torchscript(const std::vector<int64_t>& rows) {
    double loss = 0;
    int64_t correct = 0, classes = 0;
    std::vector<float> scores, labels;
    for (auto& h : test_) {
      auto r = torch_->evaluate(h, rows, scores, classes);
      loss += r.loss_sum;
      correct += r.correct;
      if (classes == 1)
        labels.insert(labels.end(), h.binary.begin(), h.binary.end());
    }
    auto n = static_cast<double>(records_);
    loss_ = loss / n;
    accuracy_ = static_cast<double>(correct) / n;
    classes_ = classes != 1;
    if (classes == 1)
      auc_ = roc_auc(scores, labels);
    if (!cfg_.predictions.empty()) {
      width_ = static_cast<size_t>(classes);
      predictions_ = std::move(scores);
    }
  }

  void evaluate_layers(const std::vector<int64_t>& rows) {
    // Batches index the model's local rows through the sorted row list.
    double loss = 0;
    int64_t correct = 0;
    std::vector<float> scores, labels, logits;
    gpu::darray x, y;
    bool first = true;
    for (auto& h : test_) {
      if (!h.local.empty())
        remap(h, rows);
      x.reserve(*dev_, h.input_bytes());
      y.reserve(*dev_, h.label_bytes());
      dev_->upload(x.get(), h.input(), h.input_bytes());
      dev_->upload(y.get(), h.labels(), h.label_bytes());
      auto keep = !cfg_.predictions.empty();
      auto r = model_->evaluate(x.get(), y.get(), h.n,
                                spec_.softmax() && !keep ? nullptr : &logits);
      loss += r.loss_sum;
      correct += r.correct;
      if (keep) {
        if (first)
          predictions_.clear();
        first = false;
        width_ = logits.size() / static_cast<size_t>(std::max(h.n, 1));
        predictions_.insert(predictions_.end(), logits.begin(), logits.end());
      }
      if (!spec_.softmax()) {
        scores.insert(scores.end(), logits.begin(), logits.end());
        labels.insert(labels.end(), h.binary.begin(), h.binary.end());
      }
    }
    auto n = static_cast<double>(records_);
    loss_ = loss / n;
    accuracy_ = static_cast<double>(correct) / n;
    if (!spec_.softmax())
      auc_ = roc_auc(scores, labels);
  }

  void log(bool final) const {
    auto step = step_;
    if (classes_)
      spdlog::info("{}: {}step {}: test loss {:.4f}, accuracy {:.4f} ({} "
                   "records)",
                   info_.label(), final ? "final, " : "", step, loss_,
                   accuracy_, records_);
    else
      spdlog::info("{}: {}step {}: test loss {:.4f}, AUC {:.4f}{} ({} "
                   "records)",
                   info_.label(), final ? "final, " : "", step, loss_, auc_,
                   cfg_.reference.empty()
                     ? std::string{}
                     : fmt::format(" (reference {:.4f})", reference_auc_),
                   records_);
  }

  // A stored batch's local rows point into its own row list; the pulled
  // table holds every test row in `rows` order. (Numeric inputs' floats
  // follow the local rows in `local`: left as they are.)
  static void remap(host_batch& h, const std::vector<int64_t>& rows) {
    for (size_t i = 0; i < h.ids; ++i) {
      auto& l = h.local[i];
      auto id = h.rows[static_cast<size_t>(l)];
      l = static_cast<int32_t>(std::lower_bound(rows.begin(), rows.end(), id)
                               - rows.begin());
    }
    h.rows = rows;
  }

  stage_info info_;
  evaluator_config cfg_;
  training_spec spec_;
  std::unique_ptr<gpu::device> dev_;
  std::unique_ptr<gpu::model> model_; // the built-in layers, or
  std::unique_ptr<torchscript_model> torch_; // a TorchScript module
  bool classes_ = true; // accuracy (else AUC) is reported
  std::unique_ptr<ps_client> client_;
  std::vector<host_batch> test_;
  std::set<int64_t> rows_;
  uint64_t records_ = 0;
  uint64_t step_ = 0, evaluations_ = 0;
  std::vector<scalar_event> events_; // results not yet reported
  double loss_ = 0, accuracy_ = 0, auc_ = 0.5, reference_auc_ = 0;
  // The last evaluation's predictions (evaluator.predictions), width_ a
  // record (0: the model returned none).
  std::vector<float> predictions_;
  size_t width_ = 0;
};

std::string check_evaluator(const topology::Stage& s) {
  if (s.config_case() != topology::Stage::kEvaluator
      && s.config_case() != topology::Stage::CONFIG_NOT_SET)
    return "expects an evaluator { ... } block";
  auto c = evaluator_config_of(s);
  if (c.every_steps < 0)
    return "every_steps must be >= 0 (0: only at the end)";
  if (!valid_device_spec(c.device))
    return "device must be \"cpu\", \"cuda\" or \"cuda:N\", got \"" + c.device
           + "\"";
  if (replicas_of(s) != 1)
    return "an evaluator has one replica";
  return {};
}

} // namespace

stage_type evaluator_type() {
  stage_type t;
  t.name = "evaluator";
  t.kind = stage_kind::sink;
  t.description = "evaluates the topology's model on a held-out split "
                  "every N steps and at the end";
  t.blocking = true;
  // It waits for the shards in finish(), so it cannot answer a checkpoint
  // cut; on resume it reads its held-out split again.
  t.replay_on_resume = true;
  t.check = check_evaluator;
  t.make = [](const stage_info& info, const topology::Stage& s) {
    return std::make_shared<evaluator>(info, s);
  };
  return t;
}

} // namespace af
