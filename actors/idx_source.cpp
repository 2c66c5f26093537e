#include "actors/idx_source.hpp"

#include <sstream>
#include <stdexcept>

#include "runtime/idx.hpp"

namespace af {

namespace {

class idx_source : public stage_logic {
public:
  idx_source(const stage_info& info, const topology::IdxSourceConfig& cfg)
    : images_path_(cfg.images()),
      labels_path_(cfg.labels()),
      epochs_(cfg.has_epochs() ? cfg.epochs() : 1),
      per_item_(cfg.has_records_per_item() ? cfg.records_per_item() : 64) {
    open();
    if (images_.rows() != labels_.rows())
      throw std::runtime_error(images_path_ + " has "
                               + std::to_string(images_.rows())
                               + " images but " + labels_path_ + " has "
                               + std::to_string(labels_.rows()) + " labels");
    auto n = images_.rows();
    begin_ = n * info.replica / info.replicas;
    end_ = n * (info.replica + 1) / info.replicas;
    seek(begin_);
  }

  bool produce(emitter& out) override {
    if (epoch_ >= static_cast<uint64_t>(epochs_))
      return false;
    auto k = std::min(per_item_, end_ - next_);
    if (k > 0) {
      tensor img, lab;
      if (!images_.read(k, img))
        throw std::runtime_error(images_.error());
      if (!labels_.read(k, lab))
        throw std::runtime_error(labels_.error());
      auto labels = tensor::allocate(dtype::i64, {k});
      auto index = tensor::allocate(dtype::i64, {k});
      for (int64_t i = 0; i < k; ++i) {
        labels.mutable_data_as<int64_t>()[i] = lab.data_as<uint8_t>()[i];
        index.mutable_data_as<int64_t>()[i] = next_ + i;
      }
      batch b;
      b.seq = seq_++;
      b.epoch = epoch_;
      b.set("image", std::move(img));
      b.set("label", std::move(labels));
      b.set("index", std::move(index));
      out.push(std::move(b));
      next_ += k;
    }
    if (next_ >= end_) {
      out.end_epoch(epoch_++);
      if (epoch_ < static_cast<uint64_t>(epochs_))
        seek(begin_);
    }
    return epoch_ < static_cast<uint64_t>(epochs_);
  }

  void metrics(std::vector<metric>& out) const override {
    out.push_back({"records_total",
                   static_cast<double>((end_ - begin_) * epochs_)});
  }

  std::string snapshot() const override {
    std::ostringstream s;
    s << "idx1 " << epoch_ << ' ' << next_;
    return s.str();
  }

  void restore(const std::string& state) override {
    std::istringstream s{state};
    std::string tag;
    int64_t next = 0;
    s >> tag >> epoch_ >> next;
    if (!s || tag != "idx1" || next < begin_ || next > end_)
      throw std::invalid_argument("not an idx_source snapshot: " + state);
    seek(next);
  }

private:
  void open() {
    if (!images_.open(images_path_))
      throw std::runtime_error(images_.error());
    if (!labels_.open(labels_path_))
      throw std::runtime_error(labels_.error());
  }

  void seek(int64_t row) {
    if (!images_.seek(row))
      throw std::runtime_error(images_.error());
    if (!labels_.seek(row))
      throw std::runtime_error(labels_.error());
    next_ = row;
  }

  std::string images_path_, labels_path_;
  int64_t epochs_, per_item_;
  idx_reader images_, labels_;
  int64_t begin_ = 0, end_ = 0, next_ = 0;
  uint64_t epoch_ = 0, seq_ = 0;
};

} // namespace

stage_type idx_source_type() {
  stage_type t;
  t.name = "idx_source";
  t.kind = stage_kind::source;
  t.description = "reads IDX images and labels (MNIST, Fashion-MNIST)";
  t.blocking = true;
  t.check = [](const topology::Stage& s) -> std::string {
    if (s.config_case() != topology::Stage::kIdxSource)
      return "needs an idx_source { images: \"...\" labels: \"...\" } block";
    auto& p = s.idx_source();
    if (p.images().empty() || p.labels().empty())
      return "idx_source.images and idx_source.labels are required";
    if ((p.has_epochs() && p.epochs() < 1)
        || (p.has_records_per_item() && p.records_per_item() < 1))
      return "epochs and records_per_item must be >= 1";
    for (auto* path : {&p.images(), &p.labels()}) {
      idx_reader r;
      if (!r.open(*path))
        return r.error();
    }
    return {};
  };
  t.make = [](const stage_info& info, const topology::Stage& s) {
    return std::make_shared<idx_source>(info, s.idx_source());
  };
  return t;
}

} // namespace af
