// The file readers' common part (csv_source, idx_source, tfrecord_source,
// image_folder_source), as strided_source is for generated data: the
// passes over the files (epochs), the epoch under way, the sequence number
// of the next item, and the checkpoint state that holds them together with
// the reader's position in its files. A reader defines its position
// (`Position`, a value CAF serializes: an integer, or a struct with an
// inspect() overload) and how to go back to one; snapshot() and restore()
// are the base's, so every reader's items keep their seq across a resume.
//
// State (save_state): tag "<reader>/2"; epoch (u64), seq (u64), Position.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "actorflow/runtime/core/random.hpp"
#include "actorflow/runtime/stage/stage.hpp"
#include "actorflow/runtime/state/state_io.hpp"

namespace af {

/// The options every reader has, under these names in its protobuf config
/// (topology.proto); a reader's config struct derives from it.
struct file_source_config {
  /// Passes over the files.
  int64_t epochs = 1;
  /// Records per item; only an epoch's last item may hold fewer.
  int64_t records_per_item = 64;
};

/// Sets the fields of `c` that the protobuf config `p` sets.
template <class Proto>
void read_file_source_config(const Proto& p, file_source_config& c) {
  if (p.has_epochs())
    c.epochs = p.epochs();
  if (p.has_records_per_item())
    c.records_per_item = p.records_per_item();
}

/// The problem with `c` for a topology check, or "" when it has none.
inline std::string check_file_source_config(const file_source_config& c) {
  if (c.epochs < 1 || c.records_per_item < 1)
    return "epochs and records_per_item must be >= 1";
  return {};
}

/// `files` in the order of epoch `epoch` of a reader with `shuffle_files`
/// (a permutation drawn from `seed`, the epoch and the replica), or as
/// they are without it.
template <class T>
std::vector<T> epoch_order(std::vector<T> files, bool shuffle, uint64_t seed,
                           uint64_t epoch, uint32_t replica) {
  if (!shuffle)
    return files;
  record_rng rng{seed, epoch, 0x66696c6573ULL ^ replica}; // "files"
  for (size_t i = files.size(); i > 1; --i)
    std::swap(files[i - 1], files[static_cast<size_t>(rng.below(i))]);
  return files;
}

template <class Position>
class file_source : public stage_logic {
public:
  std::string snapshot() const final {
    return save_state(tag_, epoch_, seq_, position());
  }

  /// Throws std::invalid_argument when `state` is not one of this reader's
  /// states (load_state's errors) or does not fit its files (an epoch past
  /// the last, a position outside this replica's share), naming what.
  void restore(const std::string& state) final {
    uint64_t epoch = 0, seq = 0;
    Position at{};
    load_state(state, tag_, epoch, seq, at);
    if (epoch > static_cast<uint64_t>(cfg_.epochs))
      throw std::invalid_argument("a damaged " + tag_ + " state: epoch "
                                  + std::to_string(epoch) + " of "
                                  + std::to_string(cfg_.epochs));
    // restore_position() sees the restored epoch (a reader whose file
    // order depends on it); when it throws, epoch and seq go back to what
    // they were (and the reader keeps its own position).
    auto was = std::pair{epoch_, seq_};
    epoch_ = epoch;
    seq_ = seq;
    try {
      restore_position(at);
    } catch (...) {
      std::tie(epoch_, seq_) = was;
      throw;
    }
  }

protected:
  /// `tag`: the state's tag, "<reader>/<version>".
  file_source(std::string tag, const file_source_config& cfg)
    : tag_(std::move(tag)), cfg_(cfg) {}

  /// Where the reader is in its files, for snapshot().
  virtual Position position() const = 0;

  /// Goes back to `at` (what position() returned in a reader of the same
  /// config and replica), at the epoch() of the restored state. Throws std::invalid_argument naming what in `at`
  /// does not fit this replica's files, or std::runtime_error when the
  /// files cannot be read up to there.
  virtual void restore_position(const Position& at) = 0;

  const std::string& tag() const noexcept { return tag_; }
  int64_t epochs() const noexcept { return cfg_.epochs; }
  int64_t records_per_item() const noexcept { return cfg_.records_per_item; }

  uint64_t epoch() const noexcept { return epoch_; }
  /// Whether an epoch is still to be read (or under way).
  bool epochs_left() const noexcept {
    return epoch_ < static_cast<uint64_t>(cfg_.epochs);
  }
  /// Moves on to the next epoch without ending this one downstream.
  void next_epoch() noexcept { ++epoch_; }
  /// Ends the epoch under way downstream and moves on to the next.
  void end_epoch(emitter& out) { out.end_epoch(epoch_++); }
  /// Goes back into the last epoch (a replica taking over a lost one's
  /// files after it ended all of its own).
  void reopen_last_epoch() noexcept {
    epoch_ = static_cast<uint64_t>(cfg_.epochs) - 1;
  }

  /// A new item of the epoch under way, with the next sequence number.
  batch new_item() {
    batch b;
    b.seq = seq_++;
    b.epoch = epoch_;
    return b;
  }

private:
  std::string tag_;
  file_source_config cfg_;
  uint64_t epoch_ = 0;
  uint64_t seq_ = 0;
};

} // namespace af
