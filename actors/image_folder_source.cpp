#include "actors/image_folder_source.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "runtime/files.hpp"

namespace af {

namespace {

class image_folder_source : public stage_logic {
public:
  image_folder_source(const stage_info& info,
                      const topology::ImageFolderSourceConfig& cfg)
    : epochs_(cfg.has_epochs() ? cfg.epochs() : 1),
      per_item_(cfg.has_records_per_item() ? cfg.records_per_item() : 32) {
    auto folder = list_image_folder(cfg.dir());
    for (size_t i = 0; i < folder.files.size(); ++i)
      if (i % info.replicas == info.replica)
        mine_.push_back({folder.files[i], static_cast<int64_t>(i)});
  }

  bool produce(emitter& out) override {
    if (epoch_ >= static_cast<uint64_t>(epochs_))
      return false;
    auto n = std::min<size_t>(static_cast<size_t>(per_item_),
                              mine_.size() - next_);
    if (n > 0) {
      bytes_builder images, keys;
      auto labels = tensor::allocate(dtype::i64, {static_cast<int64_t>(n)});
      auto index = tensor::allocate(dtype::i64, {static_cast<int64_t>(n)});
      for (size_t i = 0; i < n; ++i) {
        auto& f = mine_[next_ + i];
        std::ifstream in{f.file.path, std::ios::binary};
        std::stringstream content;
        content << in.rdbuf();
        if (!in)
          throw std::runtime_error(f.file.path + ": cannot read: "
                                   + std::strerror(errno));
        images.add(content.str());
        keys.add(f.file.path);
        labels.mutable_data_as<int64_t>()[i] = f.file.label;
        index.mutable_data_as<int64_t>()[i] = f.number;
      }
      next_ += n;
      batch b;
      b.seq = seq_++;
      b.epoch = epoch_;
      b.set("image", images.finish());
      b.set("label", std::move(labels));
      b.set("key", keys.finish());
      b.set("index", std::move(index));
      out.push(std::move(b));
    }
    if (next_ >= mine_.size()) {
      out.end_epoch(epoch_++);
      next_ = 0;
    }
    return epoch_ < static_cast<uint64_t>(epochs_);
  }

  std::string snapshot() const override {
    return "image_folder1 " + std::to_string(epoch_) + " "
           + std::to_string(next_) + " " + std::to_string(seq_);
  }

  void restore(const std::string& state) override {
    std::istringstream in{state};
    std::string tag;
    size_t next = 0;
    in >> tag >> epoch_ >> next >> seq_;
    if (!in || tag != "image_folder1" || next > mine_.size())
      throw std::invalid_argument("not an image_folder_source snapshot: "
                                  + state);
    next_ = next;
  }

private:
  struct entry {
    image_folder::entry file;
    int64_t number;
  };
  int64_t epochs_, per_item_;
  std::vector<entry> mine_;
  size_t next_ = 0;
  uint64_t epoch_ = 0, seq_ = 0;
};

} // namespace

stage_type image_folder_source_type() {
  stage_type t;
  t.name = "image_folder_source";
  t.kind = stage_kind::source;
  t.description = "reads an image folder DIR/CLASS/IMAGE, label = class";
  t.blocking = true;
  t.check = [](const topology::Stage& s) -> std::string {
    if (s.config_case() != topology::Stage::kImageFolderSource)
      return "needs an image_folder_source { dir: \"...\" } block";
    auto& p = s.image_folder_source();
    if ((p.has_epochs() && p.epochs() < 1)
        || (p.has_records_per_item() && p.records_per_item() < 1))
      return "epochs and records_per_item must be >= 1";
    try {
      list_image_folder(p.dir());
    } catch (const std::exception& ex) {
      return std::string{"image_folder_source.dir: "} + ex.what();
    }
    return {};
  };
  t.make = [](const stage_info& info, const topology::Stage& s) {
    return std::make_shared<image_folder_source>(info,
                                                 s.image_folder_source());
  };
  return t;
}

} // namespace af
