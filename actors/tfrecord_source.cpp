#include "actors/tfrecord_source.hpp"

#include <algorithm>
#include <charconv>
#include <deque>
#include <memory>
#include <sstream>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "runtime/files.hpp"
#include "runtime/tfrecord_reader.hpp"

namespace af {

namespace {

struct source_config {
  std::vector<std::string> patterns;
  tfrecord::compression compression = tfrecord::compression::automatic;
  int64_t epochs = 1;
  int64_t records_per_item = 64;
  int64_t interleave = 1;
  bool skip_corrupt = false;
  uint64_t max_record_bytes = uint64_t{1} << 30;
};

source_config config_of(const topology::Stage& s) {
  auto& p = s.tfrecord_source();
  source_config c;
  c.patterns.assign(p.files().begin(), p.files().end());
  tfrecord::parse_compression(p.compression(), c.compression);
  if (p.compression().empty())
    c.compression = tfrecord::compression::automatic;
  if (p.has_epochs())
    c.epochs = p.epochs();
  if (p.has_records_per_item())
    c.records_per_item = p.records_per_item();
  if (p.has_interleave())
    c.interleave = p.interleave();
  c.skip_corrupt = p.on_corrupt() == "skip";
  if (p.has_max_record_bytes())
    c.max_record_bytes = static_cast<uint64_t>(p.max_record_bytes());
  return c;
}

class tfrecord_source : public stage_logic {
public:
  tfrecord_source(const stage_info& info, source_config cfg)
    : label_(info.label()), cfg_(std::move(cfg)), replicas_(info.replicas) {
    all_ = expand_file_patterns(cfg_.patterns);
    files_ = share_of(info.replica);
    own_ = files_;
    if (files_.empty())
      spdlog::warn("{}: no file to read ({} files for {} replicas)", label_,
                   all_.size(), info.replicas);
  }

  // The files of a lost replica are read here too: those of every epoch
  // from `from_epoch` on, and at once those of the epochs this replica is
  // past already.
  void take_over(uint32_t replica, uint64_t from_epoch) override {
    auto share = share_of(replica);
    taken_.push_back({replica, from_epoch});
    auto epochs = static_cast<uint64_t>(cfg_.epochs);
    uint64_t passes = 0;
    if (epoch_ >= epochs) {
      // Done already: the owed passes go out under the last epoch.
      passes = from_epoch < epochs ? epochs - from_epoch : 0;
      if (passes > 0) {
        epoch_ = epochs - 1;
        files_.clear();
        next_file_ = 0;
        reopened_ = true;
      }
    } else if (from_epoch <= epoch_) {
      passes = epoch_ - from_epoch + 1;
    }
    for (uint64_t p = 0; p < passes; ++p)
      files_.insert(files_.end(), share.begin(), share.end());
    spdlog::warn("{}: takes over the {} files of replica {} from epoch {} ({} "
                 "passes now)",
                 label_, share.size(), replica, from_epoch, passes);
  }

  // Items are filled across file boundaries, so that every item of an
  // epoch but the last holds records_per_item records: a batcher downstream
  // then forwards whole items instead of copying records between them.
  // produce() never returns with a partly filled item, so a snapshot taken
  // between calls has nothing pending.
  bool produce(emitter& out) override {
    while (epoch_ < static_cast<uint64_t>(cfg_.epochs)) {
      refill_open_files();
      if (open_.empty()) {
        bool pushed = push_item(out);
        if (!reopened_)
          out.end_epoch(epoch_);
        ++epoch_;
        next_epoch_files();
        if (pushed)
          return epoch_ < static_cast<uint64_t>(cfg_.epochs);
        continue;
      }
      auto slot = turn_ % open_.size();
      if (!read_records(*open_[slot]))
        open_.erase(open_.begin() + static_cast<long>(slot));
      if (static_cast<int64_t>(index_.size()) == cfg_.records_per_item) {
        ++turn_;
        push_item(out);
        return true;
      }
    }
    return false;
  }

  void finish(emitter&) override {
    if (skipped_total_ > 0)
      spdlog::warn("{}: {} corrupt records skipped in all", label_,
                   skipped_total_);
  }

  // Snapshot: epoch, next file, then per open file: index, offset, record.
  std::string snapshot() const override {
    std::ostringstream s;
    s << "tfrecord1 " << epoch_ << ' ' << next_file_ << ' ' << turn_ << ' '
      << open_.size();
    for (auto& f : open_)
      s << ' ' << f->file << ' ' << f->reader.offset() << ' '
        << f->reader.index();
    return s.str();
  }

  void restore(const std::string& state) override {
    std::istringstream s{state};
    std::string tag;
    size_t count = 0;
    s >> tag >> epoch_ >> next_file_ >> turn_ >> count;
    if (!s || tag != "tfrecord1" || next_file_ > files_.size())
      throw std::invalid_argument("not a tfrecord_source snapshot: " + state);
    open_.clear();
    for (size_t i = 0; i < count; ++i) {
      size_t file = 0;
      uint64_t offset = 0, index = 0;
      s >> file >> offset >> index;
      if (!s || file >= files_.size())
        throw std::invalid_argument("bad tfrecord_source snapshot: " + state);
      auto f = open_file(file);
      if (!f->reader.seek(offset, index))
        throw std::runtime_error(f->reader.error());
      open_.push_back(std::move(f));
    }
  }

  // Known once this replica read its first epoch (every epoch reads the
  // same files).
  void metrics(std::vector<metric>& out) const override {
    if (epoch_ > 0 && taken_.empty() && first_epoch_records_ > 0)
      out.push_back({"records_total",
                     static_cast<double>(first_epoch_records_
                                         * static_cast<uint64_t>(cfg_.epochs))});
  }

private:
  struct file_entry {
    std::string path;
    uint32_t number;  // position in the sorted list of all files
  };

  // The files of replica r of replicas_.
  std::vector<file_entry> share_of(uint32_t r) const {
    std::vector<file_entry> out;
    for (size_t i = 0; i < all_.size(); ++i)
      if (i % replicas_ == r)
        out.push_back({all_[i], static_cast<uint32_t>(i)});
    return out;
  }

  // The files of epoch epoch_: this replica's, then those it took over.
  void next_epoch_files() {
    next_file_ = 0;
    files_ = own_;
    for (auto& t : taken_)
      if (t.from_epoch <= epoch_) {
        auto share = share_of(t.replica);
        files_.insert(files_.end(), share.begin(), share.end());
      }
  }

  struct taken_share {
    uint32_t replica;
    uint64_t from_epoch;
  };

  struct open_file_state {
    size_t file;  // index into files_
    tfrecord_reader reader;
    uint64_t skipped = 0;
  };

  std::unique_ptr<open_file_state> open_file(size_t i) {
    auto f = std::make_unique<open_file_state>();
    f->file = i;
    tfrecord_read_options opts;
    opts.compression = cfg_.compression;
    opts.max_record_bytes = cfg_.max_record_bytes;
    if (!f->reader.open(files_[i].path, opts))
      throw std::runtime_error(f->reader.error());
    return f;
  }

  void refill_open_files() {
    while (open_.size() < static_cast<size_t>(cfg_.interleave)
           && next_file_ < files_.size())
      open_.push_back(open_file(next_file_++));
  }

  // Adds records of `f` to the item being filled until it is full; false
  // when the file has nothing left.
  bool read_records(open_file_state& f) {
    auto& entry = files_[f.file];
    if (index_.empty()) {
      // Sized from the previous item, so the builders rarely grow.
      records_ = bytes_builder{last_item_bytes_};
      keys_ = bytes_builder{static_cast<size_t>(cfg_.records_per_item)
                            * (entry.path.size() + 24)};
    }
    while (static_cast<int64_t>(index_.size()) < cfg_.records_per_item) {
      std::string_view rec;
      auto st = f.reader.next_view(rec);
      if (st == read_status::end) {
        if (f.skipped > 0)
          spdlog::warn("{}: {}: {} corrupt records skipped", label_,
                       entry.path, f.skipped);
        return false;
      }
      if (st != read_status::ok) {
        if (!cfg_.skip_corrupt)
          throw std::runtime_error(f.reader.error());
        if (f.skipped++ == 0)
          spdlog::warn("{}: {} (skipping corrupt records of this file)",
                       label_, f.reader.error());
        ++skipped_total_;
        if (recoverable(st))
          continue;
        spdlog::warn("{}: {}: the rest of the file is skipped", label_,
                     entry.path);
        return false;
      }
      records_.add(rec);
      // "FILE@OFFSET", built in a reused string: one per record adds up.
      key_.assign(entry.path);
      key_ += '@';
      char digits[24];
      auto [end, ec] = std::to_chars(digits, digits + sizeof digits,
                                     f.reader.record_offset());
      key_.append(digits, end);
      keys_.add(key_);
      index_.push_back((static_cast<int64_t>(entry.number) << 32)
                       | static_cast<int64_t>(f.reader.index() - 1));
    }
    return true;
  }

  // Pushes the item being filled, if it holds any record.
  bool push_item(emitter& out) {
    if (index_.empty())
      return false;
    batch b;
    b.seq = seq_++;
    b.epoch = epoch_;
    last_item_bytes_ = records_.data_bytes() + records_.data_bytes() / 8;
    b.set("record", records_.finish());
    b.set("key", keys_.finish());
    auto idx = tensor::allocate(dtype::i64,
                                {static_cast<int64_t>(index_.size())});
    std::copy(index_.begin(), index_.end(), idx.mutable_data_as<int64_t>());
    b.set("index", std::move(idx));
    if (epoch_ == 0)
      first_epoch_records_ += index_.size();
    index_.clear();
    out.push(std::move(b));
    return true;
  }

  uint64_t first_epoch_records_ = 0;
  std::string label_;
  source_config cfg_;
  uint32_t replicas_;
  std::vector<std::string> all_;
  std::vector<file_entry> own_;   // this replica's share
  std::vector<file_entry> files_; // this epoch's: own_ and those taken over
  std::vector<taken_share> taken_;
  bool reopened_ = false;
  std::deque<std::unique_ptr<open_file_state>> open_;
  size_t next_file_ = 0;
  size_t turn_ = 0;
  uint64_t epoch_ = 0;
  uint64_t seq_ = 0;
  uint64_t skipped_total_ = 0;
  std::string key_;
  size_t last_item_bytes_ = 0;
  // The item being filled.
  bytes_builder records_, keys_;
  std::vector<int64_t> index_;
};

std::string check(const topology::Stage& s) {
  if (s.config_case() != topology::Stage::kTfrecordSource)
    return "needs a tfrecord_source { files: \"...\" } block";
  auto& p = s.tfrecord_source();
  if (p.files().empty())
    return "tfrecord_source.files is required";
  tfrecord::compression c;
  if (!tfrecord::parse_compression(p.compression(), c))
    return "tfrecord_source.compression must be \"auto\", \"none\" or "
           "\"gzip\", got \""
           + p.compression() + "\"";
  if (!p.on_corrupt().empty() && p.on_corrupt() != "fail"
      && p.on_corrupt() != "skip")
    return "tfrecord_source.on_corrupt must be \"fail\" or \"skip\"";
  auto cfg = config_of(s);
  if (cfg.epochs < 1 || cfg.records_per_item < 1 || cfg.interleave < 1)
    return "epochs, records_per_item and interleave must be >= 1";
  if (p.has_max_record_bytes() && p.max_record_bytes() < 1)
    return "max_record_bytes must be >= 1";
  try {
    expand_file_patterns(cfg.patterns);
  } catch (const std::exception& ex) {
    return std::string{"tfrecord_source.files: "} + ex.what();
  }
  return {};
}

} // namespace

stage_type tfrecord_source_type() {
  stage_type t;
  t.name = "tfrecord_source";
  t.kind = stage_kind::source;
  t.description = "reads TFRecord files (plain or gzip), sharded by file";
  t.blocking = true;
  t.reassignable = true;
  t.check = check;
  t.make = [](const stage_info& info, const topology::Stage& s) {
    return std::make_shared<tfrecord_source>(info, config_of(s));
  };
  return t;
}

} // namespace af
