// csv_source: reads CSV files into typed columns; rows that do not fit
// (wrong number of fields, a value that does not parse as its column's type,
// a missing header column) fail the job naming FILE:LINE. Declared in
// actors/sources/csv_source.hpp.
#include "actorflow/actors/sources/csv_source.hpp"

#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "actorflow/actors/sources/file_source.hpp"
#include "actorflow/runtime/core/files.hpp"
#include "actorflow/runtime/formats/csv_reader.hpp"

namespace af {

namespace {

enum class column_type { int64, float32, string };

struct column {
  std::string name;
  column_type type;
  size_t position = 0;  // in the file's rows
  bool has_default = false;
  std::string default_value; // what an empty cell reads as (has_default)
};

struct csv_config : file_source_config {
  std::vector<std::string> patterns; // paths or glob patterns; required
  std::vector<column> columns;       // required
  bool header = true;   // the first row names the columns (else: positions)
  char delimiter = ',';
  bool skip_bad = false; // rows that do not fit: skipped and counted, or fail
  bool shuffle_files = false; // a new file order each epoch
};

csv_config csv_source_config_of(const topology::Stage& s) {
  auto& p = s.csv_source();
  csv_config c;
  read_file_source_config(p, c);
  c.patterns.assign(p.files().begin(), p.files().end());
  for (auto& col : p.column())
    c.columns.push_back({col.name(),
                         col.type() == "int64"   ? column_type::int64
                         : col.type() == "float" ? column_type::float32
                                                 : column_type::string,
                         c.columns.size(), col.has_default_value(),
                         col.default_value()});
  if (p.has_header())
    c.header = p.header();
  if (!p.delimiter().empty())
    c.delimiter = p.delimiter()[0];
  c.skip_bad = p.on_bad_row() == "skip";
  c.shuffle_files = p.shuffle_files();
  return c;
}

// Position: the next file, the open file and the rows read from it
// (restore re-reads and drops them: CSV rows have no fixed offsets once
// quotes may hold newlines).
struct csv_position {
  uint64_t next_file = 0;
  bool open = false;
  uint64_t file = 0;
  int64_t rows = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, csv_position& x) {
  return f(x.next_file, x.open, x.file, x.rows);
}

class csv_source : public file_source<csv_position> {
public:
  csv_source(const stage_info& info, csv_config cfg)
    : file_source("csv_source/2", cfg),
      label_(info.label()),
      header_(cfg.header),
      delimiter_(cfg.delimiter),
      skip_bad_(cfg.skip_bad),
      columns_(std::move(cfg.columns)),
      shuffle_files_(cfg.shuffle_files),
      seed_(info.seed),
      replica_(info.replica) {
    auto all = expand_file_patterns(cfg.patterns);
    for (size_t i = 0; i < all.size(); ++i)
      if (i % info.replicas == info.replica)
        mine_.push_back({all[i], static_cast<uint32_t>(i)});
    order_files();
  }

  bool produce(emitter& out) override {
    while (epochs_left()) {
      if (!reader_ && !open_next()) {
        end_epoch(out);
        next_file_ = 0;
        order_files();
        continue;
      }
      if (read_item(out))
        return true;
      reader_.reset();
    }
    return false;
  }

  void finish(emitter&) override {
    if (skipped_ > 0)
      spdlog::warn("{}: {} bad rows skipped", label_, skipped_);
  }

private:
  csv_position position() const override {
    return {next_file_, reader_ != nullptr, file_, rows_in_file_};
  }

  void restore_position(const csv_position& at) override {
    if (at.next_file > mine_.size() || (at.open && at.file >= mine_.size()))
      throw std::invalid_argument(
        "a damaged " + tag() + " state: "
        + (at.open ? "open file " + std::to_string(at.file)
                   : "next file " + std::to_string(at.next_file))
        + " is past this replica's " + std::to_string(mine_.size())
        + " files");
    order_files(); // the restored epoch's order
    reader_.reset();
    next_file_ = at.next_file;
    if (at.open) {
      next_file_ = at.file;
      open_next();
      std::vector<std::string> row;
      int64_t line = 0;
      for (int64_t i = 0; i < at.rows; ++i)
        if (!reader_->next(row, line))
          throw std::runtime_error(files_[file_].path
                                   + ": shorter than when the snapshot was "
                                     "taken");
      rows_in_file_ = at.rows;
    }
  }

  struct file_entry {
    std::string path;
    uint32_t number;
  };

  bool open_next() {
    if (next_file_ >= files_.size())
      return false;
    file_ = next_file_++;
    rows_in_file_ = 0;
    reader_ = std::make_unique<csv_reader>();
    if (!reader_->open(files_[file_].path, delimiter_))
      throw std::runtime_error(reader_->error());
    if (header_) {
      std::vector<std::string> names;
      int64_t line = 0;
      if (!reader_->next(names, line))
        throw std::runtime_error(
          reader_->error().empty() ? files_[file_].path + ": no header row"
                                   : reader_->error());
      for (auto& c : columns_) {
        auto it = std::find(names.begin(), names.end(), c.name);
        if (it == names.end())
          throw std::runtime_error(files_[file_].path + ":"
                                   + std::to_string(line) + ": the header has "
                                   + "no column '" + c.name + "'");
        c.position = static_cast<size_t>(it - names.begin());
      }
    }
    return true;
  }

  // Reads up to per_item_ rows; false when the file had none left.
  bool read_item(emitter& out) {
    auto& path = files_[file_].path;
    std::vector<std::vector<std::string>> cells(columns_.size());
    std::vector<int64_t> lines;
    std::vector<std::string> row;
    int64_t line = 0;
    while (static_cast<int64_t>(lines.size()) < records_per_item()) {
      if (!reader_->next(row, line)) {
        if (!reader_->error().empty())
          throw std::runtime_error(reader_->error());
        break;
      }
      ++rows_in_file_;
      fill_defaults(row);
      std::string problem = check_row(row);
      if (!problem.empty()) {
        auto where = path + ":" + std::to_string(line) + ": " + problem;
        if (!skip_bad_)
          throw std::runtime_error(where);
        if (skipped_++ == 0)
          spdlog::warn("{}: {} (skipping bad rows)", label_, where);
        continue;
      }
      for (size_t k = 0; k < columns_.size(); ++k)
        cells[k].push_back(std::move(row[columns_[k].position]));
      lines.push_back(line);
    }
    if (lines.empty())
      return false;
    auto n = static_cast<int64_t>(lines.size());
    auto b = new_item();
    for (size_t k = 0; k < columns_.size(); ++k) {
      auto& c = columns_[k];
      if (c.type == column_type::int64) {
        auto t = tensor::allocate(dtype::i64, {n});
        for (int64_t i = 0; i < n; ++i)
          parse_csv_int64(cells[k][static_cast<size_t>(i)],
                          t.mutable_data_as<int64_t>()[i]);
        b.set(c.name, std::move(t));
      } else if (c.type == column_type::float32) {
        auto t = tensor::allocate(dtype::f32, {n});
        for (int64_t i = 0; i < n; ++i)
          parse_csv_float(cells[k][static_cast<size_t>(i)],
                          t.mutable_data_as<float>()[i]);
        b.set(c.name, std::move(t));
      } else {
        std::vector<std::string_view> views(cells[k].begin(), cells[k].end());
        b.set(c.name, tensor::strings(views));
      }
    }
    bytes_builder keys{0, static_cast<size_t>(n)};
    auto index = tensor::allocate(dtype::i64, {n});
    for (int64_t i = 0; i < n; ++i) {
      keys.add(path + ":" + std::to_string(lines[static_cast<size_t>(i)]));
      index.mutable_data_as<int64_t>()[i] =
        (static_cast<int64_t>(files_[file_].number) << 32)
        | lines[static_cast<size_t>(i)];
    }
    b.set("key", keys.finish());
    b.set("index", std::move(index));
    out.push(std::move(b));
    return true;
  }

  // Empty cells of columns with a default_value take it.
  void fill_defaults(std::vector<std::string>& row) const {
    for (auto& c : columns_)
      if (c.has_default && c.position < row.size() && row[c.position].empty())
        row[c.position] = c.default_value;
  }

  std::string check_row(const std::vector<std::string>& row) const {
    size_t needed = 0;
    for (auto& c : columns_)
      needed = std::max(needed, c.position + 1);
    if (row.size() < needed || (!header_ && row.size() != columns_.size()))
      return "row has " + std::to_string(row.size()) + " fields, expected "
             + std::to_string(header_ ? needed : columns_.size());
    for (auto& c : columns_) {
      auto& v = row[c.position];
      int64_t i;
      float f;
      if (c.type == column_type::int64 && !parse_csv_int64(v, i))
        return "column '" + c.name + "': '" + v + "' is not an int64";
      if (c.type == column_type::float32 && !parse_csv_float(v, f))
        return "column '" + c.name + "': '" + v + "' is not a float";
    }
    return {};
  }

  std::string label_;
  bool header_;
  char delimiter_;
  bool skip_bad_;
  std::vector<column> columns_;
  // This epoch's order of this replica's files (shuffle_files).
  void order_files() {
    files_ = epoch_order(mine_, shuffle_files_, seed_, epoch(), replica_);
  }

  std::vector<file_entry> mine_;  // this replica's files, sorted
  std::vector<file_entry> files_; // in this epoch's order
  bool shuffle_files_;
  uint64_t seed_;
  uint32_t replica_;
  std::unique_ptr<csv_reader> reader_;
  size_t next_file_ = 0, file_ = 0;
  int64_t rows_in_file_ = 0;  // data rows read from the open file
  uint64_t skipped_ = 0;
};

std::string check_csv_source(const topology::Stage& s) {
  auto& p = s.csv_source();
  for (auto& c : p.column()) {
    if (c.name().empty()
        || (c.type() != "int64" && c.type() != "float"
            && c.type() != "string"))
      return "csv_source column '" + c.name()
             + "': needs a name and a type of \"int64\", \"float\" or "
               "\"string\"";
    int64_t i;
    float f;
    if (c.has_default_value()
        && ((c.type() == "int64" && !parse_csv_int64(c.default_value(), i))
            || (c.type() == "float"
                && !parse_csv_float(c.default_value(), f))))
      return "csv_source column '" + c.name() + "': default_value '"
             + c.default_value() + "' is not "
             + (c.type() == "int64" ? "an int64" : "a float");
  }
  if (p.delimiter().size() > 1)
    return "csv_source.delimiter is one character";
  if (!p.on_bad_row().empty() && p.on_bad_row() != "fail"
      && p.on_bad_row() != "skip")
    return "csv_source.on_bad_row must be \"fail\" or \"skip\"";
  auto c = csv_source_config_of(s);
  if (auto problem = check_file_source_config(c); !problem.empty())
    return problem;
  try {
    expand_file_patterns(c.patterns);
  } catch (const std::exception& ex) {
    return std::string{"csv_source.files: "} + ex.what();
  }
  return {};
}

} // namespace

stage_type csv_source_type() {
  stage_type t;
  t.name = "csv_source";
  t.kind = stage_kind::source;
  t.description = "reads CSV files into typed columns";
  t.blocking = true;
  t.config_block = "csv_source";
  t.config_required = {"files", "column.name", "column.type"};
  t.check = check_csv_source;
  t.make = [](const stage_info& info, const topology::Stage& s) {
    return std::make_shared<csv_source>(info, csv_source_config_of(s));
  };
  return t;
}

} // namespace af
