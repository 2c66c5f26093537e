// Checkpoints on disk: a directory of complete, CRC-protected snapshots, the
// newest `keep` of them kept. What goes into one (each stage's snapshot()
// bytes) is the caller's; this file is only the storage.
//
// Layout of the store's directory DIR:
//
//   DIR/ckpt-<step>/            step as 20 decimal digits, zero-padded, so
//                               that names sort as steps do
//   DIR/ckpt-<step>/<file>      one per part: file_name(part name)
//   DIR/ckpt-<step>/MANIFEST    written last: the checkpoint is complete
//                               when it is there and verifies
//
// Part files. A part name (any bytes, not empty) becomes its file name by
// keeping the bytes A-Z a-z 0-9 . _ - [ ] and writing every other byte,
// '%' and '/' included, as %XX (two upper-case hex digits), then appending
// ".part": "ps[0]" -> "ps[0].part", "a/../b" -> "a%2F..%2Fb.part". The
// mapping is one-to-one, so only equal names collide (refused); the suffix
// keeps "." and ".." away and parts apart from MANIFEST and the ".tmp"
// files. A part file holds the part's bytes and nothing else: a state
// frame (runtime/state/state_io.hpp), though the store does not look inside.
//
// MANIFEST is text, one item per line, each line ending in '\n':
//
//   actorflow-checkpoint 2                       magic and format version
//   step <decimal>                               the directory's step
//   parts <decimal>                              count of part lines
//   part <file> <size> <crc> <escaped name>      one per part, in the order
//                                                of checkpoint::parts
//   crc <crc>                                    of every byte before this line
//
// <size> is decimal bytes; <crc> is 8 lower-case hex digits: CRC32C
// (runtime/formats/crc32c.hpp) of the part's bytes, and for the last line the
// masked CRC32C of the manifest's bytes before it. <escaped name> is the
// name with the escaping above (without the suffix); <file> must be the
// name's file name. Nothing follows the crc line.
//
// Writing (write()): the directory ckpt-<step> is made (an existing one of
// that step is emptied first, its MANIFEST before anything else); every
// part is written to "<file>.tmp", fsynced and renamed to <file>; the
// directory is fsynced; MANIFEST is written the same way, then the
// directory again. Only then are older checkpoints removed (each loses its
// MANIFEST first, so that a crash midway leaves it incomplete, never
// half-listed): every ckpt-* directory except the newest `keep` complete
// ones at or below the new step. Directories of later steps are removed
// too: writing step s means the run went on from a state before them (a
// resume), so they belong to an abandoned history.
//
// A crash at any point leaves the previous complete checkpoints intact: a
// directory without MANIFEST, with leftover .tmp files or with a part that
// does not match its manifest line is incomplete; latest() skips it and the
// next write() removes it.
//
// One writer per directory at a time; readers may run alongside a writer
// (they may see a checkpoint go away under them, and then fall back).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace af {

/// One stage's snapshot bytes under a name, e.g. "ps[0]", "read[0]",
/// "job".
struct checkpoint_part {
  std::string name;
  std::string bytes;
};

struct checkpoint {
  /// The global step the parts were taken at.
  uint64_t step = 0;
  /// Names are unique and not empty.
  std::vector<checkpoint_part> parts;
};

class checkpoint_store {
public:
  /// A store in `dir` (created on the first write) keeping the newest
  /// `keep` complete checkpoints. Throws std::invalid_argument if keep is
  /// 0 or dir is empty. Touches no file.
  explicit checkpoint_store(std::string dir, size_t keep = 3);

  const std::string& dir() const noexcept { return dir_; }
  size_t keep() const noexcept { return keep_; }

  /// Writes `c` as described above and then removes the checkpoints
  /// beyond `keep`. Writing a step that already exists replaces it (it is
  /// not listed from the moment the write starts). Throws
  /// std::invalid_argument for an empty, duplicate or too long part name
  /// (before touching any file), std::runtime_error naming the path and
  /// strerror for an I/O error (the new checkpoint is then incomplete and
  /// the older ones are untouched). Failing to remove an old checkpoint
  /// once the new one is complete is only logged (spdlog::warn).
  void write(const checkpoint& c);

  /// The newest checkpoint whose MANIFEST verifies and whose every part
  /// has the listed size and CRC, read whole; nullopt if there is none
  /// (or no directory). Checkpoints skipped on the way are logged
  /// (spdlog::warn, naming the file and what is wrong). Throws
  /// std::runtime_error for an I/O error other than a missing file (a
  /// failing disk must not look like "no checkpoint"), and, naming the
  /// version, when the newest checkpoint that is not skipped was written
  /// by ActorFlow 0.1 (format 1: refused, never skipped; write() leaves
  /// such checkpoints alone).
  std::optional<checkpoint> latest() const;

  /// The checkpoint of `step`, read whole and checked like latest();
  /// nullopt, with what is wrong in `why` (the path and the problem), when
  /// it is missing or incomplete. Throws like latest() for I/O errors.
  std::optional<checkpoint> read(uint64_t step, std::string& why) const;

  /// The steps of the complete checkpoints, ascending: MANIFEST verifies
  /// and every part file has its listed size (CRCs of the parts are only
  /// checked by latest(), which reads them). Throws like latest().
  std::vector<uint64_t> steps() const;

  /// The file name of part `name` (see above); "" when the name cannot be
  /// stored (empty, or a file name over 240 bytes).
  static std::string file_name(const std::string& name);

  /// DIR/ckpt-<step, 20 digits>.
  std::string path_of(uint64_t step) const;

private:
  std::string dir_;
  size_t keep_;
};

} // namespace af
