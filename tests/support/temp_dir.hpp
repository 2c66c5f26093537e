// A temporary directory for a test, removed with everything in it.
#pragma once

#include <string>

namespace af::test {

class temp_dir {
public:
  temp_dir();
  ~temp_dir();
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  const std::string& path() const noexcept { return path_; }
  /// path()/name
  std::string file(const std::string& name) const;
  /// Writes `content` to path()/name and returns that path.
  std::string write(const std::string& name, const std::string& content) const;
  /// The content of a file ("" if it cannot be read).
  static std::string read(const std::string& path);

private:
  std::string path_;
};

} // namespace af::test
