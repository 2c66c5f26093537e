// record_id_log: the file in which a trainer (or a sink) lists the records
// it consumed, by id, so that a test or an audit can check which records
// were trained: ids, not counts (TrainerConfig.record_ids, docs/training.md).
//
// The id of a record is a field of the batch (default "index": the one every
// reader adds, e.g. file number << 32 | record number for tfrecord_source,
// the record's number for ctr_source; the same in every run and whatever the
// replica counts). The file is text, one line per record:
//
//   STEP EPOCH ID
//
// STEP: the consumer's step that took the record (1-based: a trainer's step
// count after that step, a sink's item count); EPOCH: the batch's epoch. The
// lines of one step are written with one write(2) once the step is done (a
// trainer: after its gradients were pushed), so a process killed at any
// moment leaves every completed step listed and no partial one. Steps grow
// from line to line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actorflow/runtime/core/batch.hpp"

namespace af {

class record_id_log {
public:
  /// `path` with "{replica}" replaced by `replica`; `field` the batch field
  /// of the ids; `label` names the replica in messages. Opens nothing yet:
  /// the file is created (emptied) at the first write() or close(), unless
  /// restore() came first.
  record_id_log(const std::string& path, std::string field, uint32_t replica,
                std::string label);
  ~record_id_log();
  record_id_log(const record_id_log&) = delete;
  record_id_log& operator=(const record_id_log&) = delete;

  /// What is wrong with a path for a stage of `replicas` replicas (empty
  /// when nothing): several replicas need "{replica}" in it.
  static std::string check(const std::string& path, int64_t replicas);

  /// The ids of `b`'s records into `out` (as int64). Throws af::input_error
  /// naming the field when `b` has no such integer field of one value per
  /// record.
  void take(const batch& b, std::vector<int64_t>& out) const;

  /// Appends the lines of step `step`. Throws std::runtime_error naming the
  /// file when it cannot be written.
  void write(uint64_t step, uint64_t epoch, const std::vector<int64_t>& ids);

  /// A resumed job: the consumer continues after step `step` (its count in
  /// the checkpoint). Keeps the lines of steps up to `step` in the file and
  /// cuts those after it (trained by the interrupted run after its last
  /// checkpoint: the restored model does not hold them, and they come
  /// again). Logs what it kept and cut, `whose` naming the step ("the
  /// checkpoint's"; a trainer respawned for a lost one: "the shards' clock
  /// of this worker", whose pushes the shards do not have after it).
  void restore(uint64_t step, const char* whose = "the checkpoint's");

  /// Creates the file if nothing was written; closes it. Once.
  void close();

  const std::string& path() const noexcept { return path_; }

private:
  void open(bool truncate);

  std::string path_, field_, label_;
  int fd_ = -1;
  bool closed_ = false;
  std::string line_; // reused buffer of one step's lines
};

} // namespace af
