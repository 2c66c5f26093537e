// idx_source: reads an IDX image file and its IDX label file (MNIST,
// Fashion-MNIST; plain or gzip). Declared in actors/sources/idx_source.hpp.
#include "actorflow/actors/sources/idx_source.hpp"

#include <stdexcept>

#include "actorflow/actors/sources/file_source.hpp"
#include "actorflow/runtime/formats/idx.hpp"

namespace af {

namespace {

struct idx_config : file_source_config {
  std::string images; // the images' IDX file; required
  std::string labels; // the labels' IDX file; required
};

idx_config idx_source_config_of(const topology::Stage& s) {
  auto& p = s.idx_source();
  idx_config c;
  read_file_source_config(p, c);
  c.images = p.images();
  c.labels = p.labels();
  return c;
}

// Position: the next row.
class idx_source : public file_source<int64_t> {
public:
  idx_source(const stage_info& info, idx_config cfg)
    : file_source("idx_source/2", cfg),
      images_path_(std::move(cfg.images)),
      labels_path_(std::move(cfg.labels)) {
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
    if (!epochs_left())
      return false;
    auto k = std::min(records_per_item(), end_ - next_);
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
      auto b = new_item();
      b.set("image", std::move(img));
      b.set("label", std::move(labels));
      b.set("index", std::move(index));
      out.push(std::move(b));
      next_ += k;
    }
    if (next_ >= end_) {
      end_epoch(out);
      if (epochs_left())
        seek(begin_);
    }
    return epochs_left();
  }

  void metrics(std::vector<metric>& out) const override {
    out.push_back({metric_name::records_total,
                   static_cast<double>((end_ - begin_) * epochs())});
  }

private:
  int64_t position() const override { return next_; }

  void restore_position(const int64_t& next) override {
    if (next < begin_ || next > end_)
      throw std::invalid_argument(
        "a damaged " + tag() + " state: row " + std::to_string(next)
        + " is not in this replica's rows " + std::to_string(begin_) + " to "
        + std::to_string(end_));
    seek(next);
  }

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
  idx_reader images_, labels_;
  int64_t begin_ = 0, end_ = 0, next_ = 0;
};

} // namespace

stage_type idx_source_type() {
  stage_type t;
  t.name = "idx_source";
  t.kind = stage_kind::source;
  t.description = "reads IDX images and labels (MNIST, Fashion-MNIST)";
  t.blocking = true;
  t.config_block = "idx_source";
  t.config_required = {"images", "labels"};
  t.check = [](const topology::Stage& s) -> std::string {
    auto c = idx_source_config_of(s);
    if (auto problem = check_file_source_config(c); !problem.empty())
      return problem;
    for (auto* path : {&c.images, &c.labels}) {
      idx_reader r;
      if (!r.open(*path))
        return r.error();
    }
    return {};
  };
  t.make = [](const stage_info& info, const topology::Stage& s) {
    return std::make_shared<idx_source>(info, idx_source_config_of(s));
  };
  return t;
}

} // namespace af
