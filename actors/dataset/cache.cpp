// cache: passes the first epoch through while keeping its items, then
// replays them for `epochs - 1` more epochs after its input ended, so that
// the stages upstream (reading, parsing, decoding) run once. Declared in
// actors/dataset/cache.hpp.
#include "actorflow/actors/dataset/cache.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <unistd.h>

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include "actorflow/runtime/state/state_io.hpp"
#include "actorflow/runtime/topology/topology.hpp"

namespace af {

namespace {

struct cache_config {
  int64_t epochs = 2; // passes: the first from the input, the rest replayed
  uint64_t max_memory_bytes = uint64_t{1} << 30; // then the spill file
  std::string spill_dir; // of the spill file; empty: $TMPDIR, else /tmp
};

cache_config cache_config_of(const topology::Stage& s) {
  auto& p = s.cache();
  cache_config c;
  if (p.has_epochs())
    c.epochs = p.epochs();
  if (p.has_max_memory_bytes())
    c.max_memory_bytes = static_cast<uint64_t>(p.max_memory_bytes());
  c.spill_dir = p.spill_dir();
  return c;
}

class cache : public stage_logic {
public:
  cache(const stage_info& info, const cache_config& cfg)
    : label_(info.label()),
      epochs_(cfg.epochs),
      max_memory_(cfg.max_memory_bytes),
      spill_dir_(cfg.spill_dir) {
    if (spill_dir_.empty()) {
      auto* tmp = std::getenv("TMPDIR");
      spill_dir_ = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
    }
  }

  ~cache() override { close_spill(); }

  void process(batch&& item, emitter& out) override {
    if (epoch_ > 0) // (the runtime replays only after every input ended)
      throw std::runtime_error("cache: an item arrived after the replay "
                               "began");
    if (item.epoch > 0)
      throw std::runtime_error("cache: the input delivered epoch "
                               + std::to_string(item.epoch)
                               + "; give the cache a single-epoch input and "
                                 "set cache.epochs instead");
    keep(item);
    seq_ = std::max(seq_, item.seq + 1);
    first_pass_records_ += static_cast<uint64_t>(item.records());
    out.push(std::move(item));
  }

  bool produce(emitter& out) override {
    if (epoch_ == 0)
      start_replay();
    if (epoch_ >= static_cast<uint64_t>(epochs_))
      return false;
    batch b;
    if (next_ < memory_.size()) {
      b = memory_[next_];
    } else if (!read_spilled(b)) {
      out.end_epoch(epoch_);
      ++epoch_;
      next_ = 0;
      if (spill_ != nullptr)
        std::rewind(spill_);
      return epoch_ < static_cast<uint64_t>(epochs_);
    }
    ++next_;
    b.epoch = epoch_;
    b.seq = seq_++;
    out.push(std::move(b));
    return true;
  }

  void finish(emitter&) override { close_spill(); }

  // Known once the first pass is complete (then every epoch repeats it).
  void metrics(std::vector<metric>& out) const override {
    if (epoch_ > 0)
      out.push_back({metric_name::records_total,
                     static_cast<double>(first_pass_records_
                                         * static_cast<uint64_t>(epochs_))});
  }

  // The cached items themselves (the memory's, then the spill file's) and
  // where the replay stands: a checkpoint holds the whole cached epoch, so
  // that a resumed job replays it without reading its input again. In the
  // first pass these are the items passed on so far (the input goes on
  // after them); in a replayed epoch `next_` items of it went out.
  std::string snapshot() const override {
    std::vector<batch> items = memory_;
    if (spill_ != nullptr) {
      if (epoch_ == 0 && std::fflush(spill_) != 0)
        throw std::runtime_error("cache: cannot write the spill file in "
                                 + spill_dir_ + ": " + std::strerror(errno));
      std::vector<char> buf;
      for (uint64_t at = 0; at < spill_end_;) {
        uint64_t n = 0;
        pread_all(&n, sizeof n, at);
        buf.resize(n);
        pread_all(buf.data(), n, at + sizeof n);
        batch b;
        caf::binary_deserializer source{nullptr, buf};
        if (source(b))
          throw std::runtime_error("cache: the spill file is corrupt");
        items.push_back(std::move(b));
        at += sizeof n + n;
      }
    }
    // (The tensors' bytes, and room for each item's names and shapes.)
    return save_sized_state(memory_bytes_ + spilled_bytes_
                              + 1024 * (items.size() + 1),
                            "cache/1", items, epoch_, next_, seq_,
                            first_pass_records_);
  }

  void restore(const std::string& state) override {
    std::vector<batch> items;
    uint64_t epoch = 0, next = 0, seq = 0, records = 0;
    load_state(state, "cache/1", items, epoch, next, seq, records);
    if (epoch > static_cast<uint64_t>(epochs_))
      throw std::invalid_argument(
        "the checkpoint's cache is in epoch " + std::to_string(epoch)
        + ", past cache.epochs = " + std::to_string(epochs_));
    if (epoch > 0 && next > items.size())
      throw std::invalid_argument("the checkpoint's cache replayed "
                                  + std::to_string(next) + " of "
                                  + std::to_string(items.size()) + " items");
    close_spill();
    memory_.clear();
    memory_bytes_ = 0;
    spill_end_ = 0;
    spilled_bytes_ = 0;
    for (auto& item : items)
      keep(item);
    epoch_ = 0;
    seq_ = seq;
    first_pass_records_ = records;
    if (epoch > 0) {
      start_replay();
      epoch_ = epoch;
      // Skip what this epoch replayed already: the memory's by index, the
      // spill file's by reading past it.
      batch skipped;
      for (next_ = memory_.size(); next_ < next; ++next_)
        if (!read_spilled(skipped))
          throw std::logic_error("cache: the spill file ended early");
      next_ = next;
    }
  }

private:
  // Into memory while it fits, else (and from then on) into the spill file.
  void keep(const batch& item) {
    auto bytes = item.byte_size();
    if (spill_ == nullptr && memory_bytes_ + bytes <= max_memory_) {
      memory_bytes_ += bytes;
      memory_.push_back(item);
    } else {
      spill(item);
    }
  }

  void pread_all(void* to, size_t n, uint64_t at) const {
    auto* p = static_cast<char*>(to);
    while (n > 0) {
      auto got = ::pread(::fileno(spill_), p, n, static_cast<off_t>(at));
      if (got < 0 && errno == EINTR)
        continue;
      if (got <= 0)
        throw std::runtime_error("cache: cannot read the spill file in "
                                 + spill_dir_ + ": "
                                 + (got < 0 ? std::strerror(errno)
                                            : "it is truncated"));
      p += got;
      n -= static_cast<size_t>(got);
      at += static_cast<uint64_t>(got);
    }
  }

  void start_replay() {
    epoch_ = 1;
    next_ = 0;
    if (spill_ != nullptr) {
      std::fflush(spill_);
      std::rewind(spill_);
    }
  }

  void spill(const batch& item) {
    if (spill_ == nullptr) {
      std::string tmpl = spill_dir_ + "/actorflow-cache-XXXXXX";
      int fd = ::mkstemp(tmpl.data());
      if (fd < 0)
        throw std::runtime_error("cache: cannot create a spill file in "
                                 + spill_dir_ + ": " + std::strerror(errno));
      ::unlink(tmpl.c_str());  // gone when closed, even after a crash
      spill_ = ::fdopen(fd, "w+b");
    }
    buf_.clear();
    caf::binary_serializer sink{nullptr, buf_};
    if (sink(const_cast<batch&>(item)))
      throw std::runtime_error("cache: cannot serialize an item");
    uint64_t n = buf_.size();
    if (std::fwrite(&n, sizeof n, 1, spill_) != 1
        || std::fwrite(buf_.data(), 1, n, spill_) != n)
      throw std::runtime_error("cache: cannot write the spill file in "
                               + spill_dir_ + ": " + std::strerror(errno));
    spilled_bytes_ += n;
    spill_end_ += sizeof n + n;
  }

  bool read_spilled(batch& out) {
    if (spill_ == nullptr)
      return false;
    uint64_t n = 0;
    if (std::fread(&n, sizeof n, 1, spill_) != 1)
      return false;
    buf_.resize(n);
    if (std::fread(buf_.data(), 1, n, spill_) != n)
      throw std::runtime_error("cache: the spill file is truncated");
    caf::binary_deserializer source{nullptr, buf_};
    if (source(out))
      throw std::runtime_error("cache: the spill file is corrupt");
    return true;
  }

  void close_spill() {
    if (spill_ != nullptr) {
      std::fclose(spill_);
      spill_ = nullptr;
    }
  }

  std::string label_;
  int64_t epochs_;
  uint64_t max_memory_;
  std::string spill_dir_;
  std::vector<batch> memory_;
  uint64_t memory_bytes_ = 0;
  uint64_t spilled_bytes_ = 0;
  uint64_t spill_end_ = 0; // bytes written to the spill file
  std::FILE* spill_ = nullptr;
  std::vector<char> buf_;
  uint64_t epoch_ = 0;
  uint64_t next_ = 0; // items replayed in this epoch
  uint64_t first_pass_records_ = 0;
  // Replayed items continue the first pass's sequence numbers, so that they
  // stay unique (deterministic mode reorders by them).
  uint64_t seq_ = 0;
};

} // namespace

stage_type cache_type() {
  stage_type t;
  t.name = "cache";
  t.kind = stage_kind::transform;
  t.description = "keeps the first epoch (memory, then a spill file) and "
                  "replays it";
  t.blocking = true;  // spilling and replaying do file I/O
  t.check = [](const topology::Stage& s) -> std::string {
    if (s.config_case() != topology::Stage::kCache
        && s.config_case() != topology::Stage::CONFIG_NOT_SET)
      return "expects a cache { ... } block";
    auto& p = s.cache();
    if (p.has_epochs() && p.epochs() < 1)
      return "cache.epochs must be >= 1";
    if (p.has_max_memory_bytes() && p.max_memory_bytes() < 0)
      return "cache.max_memory_bytes must be >= 0";
    if (replicas_of(s) != 1)
      return "a cache has exactly one replica";
    return {};
  };
  t.make = [](const stage_info& info, const topology::Stage& s) {
    return std::make_shared<cache>(info, cache_config_of(s));
  };
  return t;
}

} // namespace af
