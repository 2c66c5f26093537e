// Finding input files: glob patterns and image folders. Declared in
// runtime/core/files.hpp.
#include "actorflow/runtime/core/files.hpp"

#include <algorithm>
#include <filesystem>
#include <glob.h>
#include <stdexcept>

namespace af {

std::vector<std::string> expand_file_patterns(
  const std::vector<std::string>& patterns) {
  std::vector<std::string> files;
  for (auto& p : patterns) {
    glob_t g{};
    int rc = ::glob(p.c_str(), GLOB_ERR, nullptr, &g);
    if (rc != 0) {
      globfree(&g);
      throw std::runtime_error("'" + p + "' matches no file");
    }
    for (size_t i = 0; i < g.gl_pathc; ++i)
      files.emplace_back(g.gl_pathv[i]);
    globfree(&g);
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  return files;
}

image_folder list_image_folder(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw std::runtime_error(dir + ": not a directory");
  image_folder out;
  for (auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory())
      out.classes.push_back(e.path().filename().string());
  std::sort(out.classes.begin(), out.classes.end());
  if (out.classes.empty())
    throw std::runtime_error(dir + ": no class subfolders (expected "
                                   "DIR/CLASS/IMAGE files)");
  for (size_t c = 0; c < out.classes.size(); ++c) {
    std::vector<std::string> names;
    for (auto& e : fs::directory_iterator(dir + "/" + out.classes[c], ec))
      if (e.is_regular_file())
        names.push_back(e.path().string());
    std::sort(names.begin(), names.end());
    for (auto& n : names)
      out.files.push_back({n, static_cast<int64_t>(c)});
  }
  return out;
}

} // namespace af
