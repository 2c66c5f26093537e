// Reads CSV files row by row (RFC 4180: quoted fields, doubled quotes,
// newlines inside quotes) with libcsv, in strict mode. Declared in
// runtime/formats/csv_reader.hpp.
#include "actorflow/runtime/formats/csv_reader.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <csv.h>

namespace af {

struct csv_reader::impl {
  std::FILE* file = nullptr;
  csv_parser parser{};
  bool parser_ready = false;
  bool at_end = false;
  int64_t line = 0;             // lines fed so far
  int64_t row_start = 0;        // line of the row being built
  bool row_open = false;
  std::vector<std::string> current;
  std::deque<std::pair<std::vector<std::string>, int64_t>> rows;

  ~impl() {
    if (parser_ready)
      csv_free(&parser);
    if (file != nullptr)
      std::fclose(file);
  }

  static void on_field(void* data, size_t n, void* self) {
    auto* me = static_cast<impl*>(self);
    if (!me->row_open) {
      me->row_open = true;
      me->row_start = me->line;
    }
    me->current.emplace_back(static_cast<const char*>(data), n);
  }

  static void on_row(int, void* self) {
    auto* me = static_cast<impl*>(self);
    if (!me->row_open)
      me->row_start = me->line;
    me->rows.emplace_back(std::move(me->current), me->row_start);
    me->current.clear();
    me->row_open = false;
  }
};

csv_reader::csv_reader() = default;
csv_reader::~csv_reader() = default;

bool csv_reader::open(const std::string& path, char delimiter) {
  path_ = path;
  impl_ = std::make_unique<impl>();
  impl_->file = std::fopen(path.c_str(), "rb");
  if (impl_->file == nullptr) {
    error_ = path + ": cannot open: " + std::strerror(errno);
    return false;
  }
  if (csv_init(&impl_->parser, CSV_STRICT | CSV_STRICT_FINI) != 0) {
    error_ = path + ": cannot initialise the CSV parser";
    return false;
  }
  impl_->parser_ready = true;
  csv_set_delim(&impl_->parser, static_cast<unsigned char>(delimiter));
  return true;
}

bool csv_reader::feed_more() {
  char* line = nullptr;
  size_t cap = 0;
  auto n = ::getline(&line, &cap, impl_->file);
  bool ok = true;
  if (n < 0) {
    impl_->at_end = true;
    if (csv_fini(&impl_->parser, impl::on_field, impl::on_row, impl_.get())
        != 0) {
      error_ = path_ + ":" + std::to_string(impl_->row_start)
               + ": malformed CSV: "
               + csv_strerror(csv_error(&impl_->parser))
               + " (an unterminated quote?)";
      ok = false;
    }
  } else {
    ++impl_->line;
    if (csv_parse(&impl_->parser, line, static_cast<size_t>(n),
                  impl::on_field, impl::on_row, impl_.get())
        != static_cast<size_t>(n)) {
      error_ = path_ + ":" + std::to_string(impl_->line) + ": malformed CSV: "
               + csv_strerror(csv_error(&impl_->parser));
      ok = false;
    }
  }
  std::free(line);
  return ok;
}

bool csv_reader::next(std::vector<std::string>& fields, int64_t& line) {
  if (!impl_)
    return false;
  while (impl_->rows.empty()) {
    if (impl_->at_end)
      return false;
    if (!feed_more())
      return false;
  }
  fields = std::move(impl_->rows.front().first);
  line = impl_->rows.front().second;
  impl_->rows.pop_front();
  return true;
}

bool parse_csv_int64(const std::string& cell, int64_t& out) {
  if (cell.empty())
    return false;
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(cell.c_str(), &end, 10);
  if (end != cell.c_str() + cell.size() || end == cell.c_str()
      || errno == ERANGE)
    return false;
  out = static_cast<int64_t>(x);
  return true;
}

bool parse_csv_float(const std::string& cell, float& out) {
  if (cell.empty())
    return false;
  char* end = nullptr;
  errno = 0;
  float x = std::strtof(cell.c_str(), &end);
  if (end != cell.c_str() + cell.size() || end == cell.c_str())
    return false;
  // ERANGE: overflow (HUGE_VALF) is refused; underflow is the rounded value.
  if (errno == ERANGE && std::isinf(x))
    return false;
  out = x;
  return true;
}

} // namespace af
