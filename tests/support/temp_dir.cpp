#include "tests/support/temp_dir.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace af::test {

temp_dir::temp_dir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "af_test_XXXXXX")
                       .string();
  if (::mkdtemp(tmpl.data()) == nullptr)
    throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

temp_dir::~temp_dir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string temp_dir::file(const std::string& name) const {
  return path_ + "/" + name;
}

std::string temp_dir::write(const std::string& name,
                            const std::string& content) const {
  auto p = file(name);
  std::ofstream out{p, std::ios::binary};
  out << content;
  return p;
}

std::string temp_dir::read(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

} // namespace af::test
