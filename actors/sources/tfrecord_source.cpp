// tfrecord_source: reads TFRecord files (plain or GZIP), sharded across the
// stage's replicas by file (file i goes to replica i mod replicas), several
// files per replica read in turn (interleave). Declared in
// actors/sources/tfrecord_source.hpp.
#include "actorflow/actors/sources/tfrecord_source.hpp"

#include <algorithm>
#include <charconv>
#include <deque>
#include <memory>
#include <stdexcept>
#include <utility>

#include <spdlog/spdlog.h>

#include "actorflow/actors/sources/file_source.hpp"
#include "actorflow/runtime/core/files.hpp"
#include "actorflow/runtime/formats/tfrecord_reader.hpp"

namespace af {

namespace {

struct tfrecord_config : file_source_config {
  std::vector<std::string> patterns; // paths or glob patterns; required
  tfrecord::compression compression = tfrecord::compression::automatic;
  int64_t interleave = 1; // files read at once, in turn
  bool skip_corrupt = false; // corrupt records: skipped and counted, or fail
  uint64_t max_record_bytes = uint64_t{1} << 30; // larger ones are corrupt
  bool shuffle_files = false; // a new file order each epoch
};

tfrecord_config tfrecord_source_config_of(const topology::Stage& s) {
  auto& p = s.tfrecord_source();
  tfrecord_config c;
  read_file_source_config(p, c);
  c.patterns.assign(p.files().begin(), p.files().end());
  tfrecord::parse_compression(p.compression(), c.compression);
  if (p.compression().empty())
    c.compression = tfrecord::compression::automatic;
  if (p.has_interleave())
    c.interleave = p.interleave();
  c.skip_corrupt = p.on_corrupt() == "skip";
  if (p.has_max_record_bytes())
    c.max_record_bytes = static_cast<uint64_t>(p.max_record_bytes());
  c.shuffle_files = p.shuffle_files();
  return c;
}

// Position: the next file, the turn among the open files, and each open
// file's position.
struct open_file_position {
  uint64_t file = 0; // index into the files of the epoch
  uint64_t offset = 0;
  uint64_t index = 0; // of the next record in the file
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, open_file_position& x) {
  return f(x.file, x.offset, x.index);
}

struct tfrecord_position {
  uint64_t next_file = 0;
  uint64_t turn = 0;
  std::vector<open_file_position> open;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tfrecord_position& x) {
  return f(x.next_file, x.turn, x.open);
}

class tfrecord_source : public file_source<tfrecord_position> {
public:
  tfrecord_source(const stage_info& info, tfrecord_config cfg)
    : file_source("tfrecord_source/2", cfg), label_(info.label()),
      cfg_(std::move(cfg)), replicas_(info.replicas), replica_(info.replica),
      seed_(info.seed) {
    all_ = expand_file_patterns(cfg_.patterns);
    own_ = share_of(info.replica);
    files_ = ordered(own_, 0);
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
    auto epochs = static_cast<uint64_t>(this->epochs());
    uint64_t passes = 0;
    if (!epochs_left()) {
      // Done already: the owed passes go out under the last epoch.
      passes = from_epoch < epochs ? epochs - from_epoch : 0;
      if (passes > 0) {
        reopen_last_epoch();
        files_.clear();
        next_file_ = 0;
        reopened_ = true;
      }
    } else if (from_epoch <= epoch()) {
      passes = epoch() - from_epoch + 1;
    }
    for (uint64_t p = 0; p < passes; ++p) {
      auto order = ordered(share, from_epoch + p);
      files_.insert(files_.end(), order.begin(), order.end());
    }
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
    while (epochs_left()) {
      refill_open_files();
      if (open_.empty()) {
        bool pushed = push_item(out);
        if (reopened_)
          next_epoch();
        else
          end_epoch(out);
        next_epoch_files();
        if (pushed)
          return epochs_left();
        continue;
      }
      auto slot = turn_ % open_.size();
      if (!read_records(*open_[slot]))
        open_.erase(open_.begin() + static_cast<long>(slot));
      if (static_cast<int64_t>(index_.size()) == records_per_item()) {
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

  // Known once this replica read its first epoch (every epoch reads the
  // same files).
  void metrics(std::vector<metric>& out) const override {
    if (epoch() > 0 && taken_.empty() && first_epoch_records_ > 0)
      out.push_back({metric_name::records_total,
                     static_cast<double>(first_epoch_records_
                                         * static_cast<uint64_t>(epochs()))});
  }

private:
  tfrecord_position position() const override {
    tfrecord_position at{next_file_, turn_, {}};
    for (auto& f : open_)
      at.open.push_back({f->file, f->reader.offset(), f->reader.index()});
    return at;
  }

  void restore_position(const tfrecord_position& at) override {
    auto refuse = [&](const char* what, uint64_t file) {
      throw std::invalid_argument(
        "a damaged " + tag() + " state: " + what + " " + std::to_string(file)
        + " is past this replica's " + std::to_string(files_.size())
        + " files");
    };
    // The order of the restored epoch; the reader is left as it was when
    // the state does not fit.
    auto before = std::exchange(files_, ordered(own_, epoch()));
    std::deque<std::unique_ptr<open_file_state>> opened;
    try {
      if (at.next_file > files_.size())
        refuse("next file", at.next_file);
      for (auto& o : at.open) {
        if (o.file >= files_.size())
          refuse("open file", o.file);
        auto f = open_file(o.file);
        if (!f->reader.seek(o.offset, o.index))
          throw std::runtime_error(f->reader.error());
        opened.push_back(std::move(f));
      }
    } catch (...) {
      files_ = std::move(before);
      throw;
    }
    open_ = std::move(opened);
    next_file_ = at.next_file;
    turn_ = at.turn;
  }

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

  // The files of epoch epoch(): this replica's, then those it took over,
  // each share in the epoch's order.
  void next_epoch_files() {
    next_file_ = 0;
    files_ = ordered(own_, epoch());
    for (auto& t : taken_)
      if (t.from_epoch <= epoch()) {
        auto share = ordered(share_of(t.replica), epoch());
        files_.insert(files_.end(), share.begin(), share.end());
      }
  }

  // `share` in the order of `epoch` (shuffle_files), drawn per replica of
  // the share's own files so that a replica taking over reads them as
  // their owner would have.
  std::vector<file_entry> ordered(std::vector<file_entry> share,
                                  uint64_t epoch) const {
    auto owner = share.empty() ? replica_ : share.front().number % replicas_;
    return epoch_order(std::move(share), cfg_.shuffle_files, seed_, epoch,
                       owner);
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
      auto n = static_cast<size_t>(records_per_item());
      records_ = bytes_builder{last_item_bytes_, n};
      keys_ = bytes_builder{n * (entry.path.size() + 24), n};
    }
    while (static_cast<int64_t>(index_.size()) < records_per_item()) {
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
    auto b = new_item();
    last_item_bytes_ = records_.data_bytes() + records_.data_bytes() / 8;
    b.set("record", records_.finish());
    b.set("key", keys_.finish());
    auto idx = tensor::allocate(dtype::i64,
                                {static_cast<int64_t>(index_.size())});
    std::copy(index_.begin(), index_.end(), idx.mutable_data_as<int64_t>());
    b.set("index", std::move(idx));
    if (epoch() == 0)
      first_epoch_records_ += index_.size();
    index_.clear();
    out.push(std::move(b));
    return true;
  }

  uint64_t first_epoch_records_ = 0;
  std::string label_;
  tfrecord_config cfg_;
  uint32_t replicas_;
  uint32_t replica_;
  uint64_t seed_;
  std::vector<std::string> all_;
  std::vector<file_entry> own_;   // this replica's share
  std::vector<file_entry> files_; // this epoch's: own_ and those taken over
  std::vector<taken_share> taken_;
  bool reopened_ = false;
  std::deque<std::unique_ptr<open_file_state>> open_;
  size_t next_file_ = 0;
  size_t turn_ = 0;
  uint64_t skipped_total_ = 0;
  std::string key_;
  size_t last_item_bytes_ = 0;
  // The item being filled.
  bytes_builder records_, keys_;
  std::vector<int64_t> index_;
};

std::string check_tfrecord_source(const topology::Stage& s) {
  auto& p = s.tfrecord_source();
  tfrecord::compression c;
  if (!tfrecord::parse_compression(p.compression(), c))
    return "tfrecord_source.compression must be \"auto\", \"none\" or "
           "\"gzip\", got \""
           + p.compression() + "\"";
  if (!p.on_corrupt().empty() && p.on_corrupt() != "fail"
      && p.on_corrupt() != "skip")
    return "tfrecord_source.on_corrupt must be \"fail\" or \"skip\"";
  auto cfg = tfrecord_source_config_of(s);
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
  t.config_block = "tfrecord_source";
  t.config_required = {"files"};
  t.check = check_tfrecord_source;
  t.make = [](const stage_info& info, const topology::Stage& s) {
    return std::make_shared<tfrecord_source>(info, tfrecord_source_config_of(s));
  };
  return t;
}

} // namespace af
