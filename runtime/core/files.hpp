// Finding input files: glob patterns and image folders.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace af {

/// The files `patterns` name (glob patterns allowed), sorted, without
/// duplicates. Throws std::runtime_error naming a pattern that matches
/// nothing.
std::vector<std::string> expand_file_patterns(
  const std::vector<std::string>& patterns);

/// An image folder DIR/CLASS/FILE: classes are the subfolders sorted by
/// name, files sorted by name within each class.
struct image_folder {
  std::vector<std::string> classes;
  struct entry {
    std::string path;
    int64_t label;
  };
  std::vector<entry> files;
};

/// Lists `dir`. Throws std::runtime_error if it is not a folder or has no
/// class subfolder.
image_folder list_image_folder(const std::string& dir);

} // namespace af
