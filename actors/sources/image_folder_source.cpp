// image_folder_source: reads the files of an image folder DIR/CLASS/IMAGE as
// they are (decoding is image_decode's job), with the class index as label.
// Declared in actors/sources/image_folder_source.hpp.
#include "actorflow/actors/sources/image_folder_source.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "actorflow/actors/sources/file_source.hpp"
#include "actorflow/runtime/core/files.hpp"

namespace af {

namespace {

struct image_folder_config : file_source_config {
  std::string dir; // DIR of DIR/CLASS/IMAGE
  bool shuffle_files = false; // a new order each epoch
};

image_folder_config image_folder_source_config_of(const topology::Stage& s) {
  auto& p = s.image_folder_source();
  image_folder_config c;
  read_file_source_config(p, c);
  c.dir = p.dir();
  c.shuffle_files = p.shuffle_files();
  return c;
}

// Position: the next of this replica's files.
class image_folder_source : public file_source<uint64_t> {
public:
  image_folder_source(const stage_info& info, const image_folder_config& cfg)
    : file_source("image_folder_source/2", cfg),
      shuffle_files_(cfg.shuffle_files), seed_(info.seed),
      replica_(info.replica) {
    auto folder = list_image_folder(cfg.dir);
    for (size_t i = 0; i < folder.files.size(); ++i)
      if (i % info.replicas == info.replica)
        sorted_.push_back({folder.files[i], static_cast<int64_t>(i)});
    order_files();
  }

  bool produce(emitter& out) override {
    if (!epochs_left())
      return false;
    auto n = std::min<size_t>(static_cast<size_t>(records_per_item()),
                              mine_.size() - next_);
    if (n > 0) {
      bytes_builder images{0, n}, keys{0, n};
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
      auto b = new_item();
      b.set("image", images.finish());
      b.set("label", std::move(labels));
      b.set("key", keys.finish());
      b.set("index", std::move(index));
      out.push(std::move(b));
    }
    if (next_ >= mine_.size()) {
      end_epoch(out);
      next_ = 0;
      order_files();
    }
    return epochs_left();
  }

private:
  uint64_t position() const override { return next_; }

  void restore_position(const uint64_t& next) override {
    if (next > sorted_.size())
      throw std::invalid_argument(
        "a damaged " + tag() + " state: file " + std::to_string(next)
        + " is past this replica's " + std::to_string(sorted_.size())
        + " files");
    order_files(); // the restored epoch's order
    next_ = next;
  }

  struct entry {
    image_folder::entry file;
    int64_t number;
  };
  // This epoch's order of this replica's files (shuffle_files).
  void order_files() {
    mine_ = epoch_order(sorted_, shuffle_files_, seed_, epoch(), replica_);
  }

  std::vector<entry> sorted_; // this replica's files, sorted
  std::vector<entry> mine_;   // in this epoch's order
  size_t next_ = 0;
  bool shuffle_files_;
  uint64_t seed_;
  uint32_t replica_;
};

} // namespace

stage_type image_folder_source_type() {
  stage_type t;
  t.name = "image_folder_source";
  t.kind = stage_kind::source;
  t.description = "reads an image folder DIR/CLASS/IMAGE, label = class";
  t.blocking = true;
  t.config_block = "image_folder_source";
  t.config_required = {"dir"};
  t.check = [](const topology::Stage& s) -> std::string {
    auto c = image_folder_source_config_of(s);
    if (auto problem = check_file_source_config(c); !problem.empty())
      return problem;
    try {
      list_image_folder(c.dir);
    } catch (const std::exception& ex) {
      return std::string{"image_folder_source.dir: "} + ex.what();
    }
    return {};
  };
  t.make = [](const stage_info& info, const topology::Stage& s) {
    return std::make_shared<image_folder_source>(info, image_folder_source_config_of(s));
  };
  return t;
}

} // namespace af
