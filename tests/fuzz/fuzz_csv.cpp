// libFuzzer target: the CSV reader (runtime/formats/csv_reader.hpp) on arbitrary
// file contents, with ',' and with ';' as the delimiter. Every outcome must
// be rows with the line each starts on, or an error naming the file and
// line; nothing may crash, hang or allocate wildly.
#include <cstdint>
#include <string>
#include <vector>

#include "actorflow/runtime/formats/csv_reader.hpp"
#include "tests/fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = af::fuzz::scratch_dir() + "/input.csv";
  af::fuzz::write_file(path, {reinterpret_cast<const char*>(data), size});
  // Rows start on lines 1 .. (newlines + 1).
  int64_t max_line = 1;
  for (size_t i = 0; i < size; ++i)
    max_line += data[i] == '\n';
  for (char delimiter : {',', ';'}) {
    af::csv_reader r;
    if (!r.open(path, delimiter))
      __builtin_trap(); // the file is there: opening cannot fail
    std::vector<std::string> fields;
    int64_t line = 0, last = 0;
    size_t bytes = 0;
    while (r.next(fields, line)) {
      if (line < 1 || line > max_line || line < last)
        __builtin_trap(); // a row must name the line it starts on
      last = line;
      for (auto& f : fields)
        bytes += f.size();
      if (bytes > size)
        __builtin_trap(); // fields are made of the input's bytes
    }
    if (!r.error().empty()
        && r.error().compare(0, path.size() + 1, path + ":") != 0)
      __builtin_trap(); // every error names the file (and line)
  }
  return 0;
}
