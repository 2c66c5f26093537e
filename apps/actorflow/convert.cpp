// `actorflow convert`: datasets into TFRecord files of tf.Example records.
// Declared in apps/actorflow/convert.hpp.
#include "apps/actorflow/convert.hpp"

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "apps/actorflow/options.hpp"
#include "apps/actorflow/progress.hpp"
#include "apps/actorflow/shard_writer.hpp"
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "actorflow/proto/example.pb.h"
#include "actorflow/runtime/core/files.hpp"
#include "actorflow/runtime/formats/csv_reader.hpp"
#include "actorflow/runtime/formats/idx.hpp"
#include "actorflow/runtime/image/image_codec.hpp"

namespace af::cli {

namespace {

struct output_options {
  std::string prefix;
  int shards = 1;
  std::string compression = "none";
};

void add_output_options(CLI::App& cmd, output_options& o) {
  cmd.add_option("--out", o.prefix,
                 "Output prefix: files are PREFIX-00000-of-0000N.tfrecord")
    ->required();
  cmd.add_option("--shards", o.shards, "Number of output files")
    ->check(CLI::PositiveNumber)
    ->capture_default_str();
  cmd.add_option("--compression", o.compression, "none or gzip")
    ->check(CLI::IsMember({"none", "gzip"}))
    ->capture_default_str();
}

// A progress line on a terminal, a log line every 5 s otherwise.
class convert_progress {
public:
  explicit convert_progress(int64_t total)
    : total_(total), terminal_(isatty(STDERR_FILENO) == 1) {}

  void update(int64_t done, bool final = false) {
    auto now = std::chrono::steady_clock::now();
    auto since = now - last_;
    if (!final && since < (terminal_ ? std::chrono::milliseconds{250}
                                     : std::chrono::milliseconds{5000}))
      return;
    last_ = now;
    double secs = std::chrono::duration<double>(now - begin_).count();
    auto rate = human_count(done / std::max(secs, 1e-9));
    if (terminal_) {
      std::fprintf(stderr, "\r\033[Kconverted %lld / %lld records (%s/s)",
                   static_cast<long long>(done),
                   static_cast<long long>(total_), rate.c_str());
      if (final)
        std::fprintf(stderr, "\n");
    } else {
      spdlog::info("converted {} / {} records ({}/s)", done, total_, rate);
    }
  }

private:
  int64_t total_;
  bool terminal_;
  std::chrono::steady_clock::time_point begin_ =
    std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_ = begin_;
};

void set_int64(tf::Example& ex, const std::string& name, int64_t v) {
  (*ex.mutable_features()->mutable_feature())[name]
    .mutable_int64_list()
    ->add_value(v);
}

void set_bytes(tf::Example& ex, const std::string& name, std::string v) {
  (*ex.mutable_features()->mutable_feature())[name]
    .mutable_bytes_list()
    ->add_value(std::move(v));
}

// Serializes with map entries sorted by key: protobuf's default order
// varies from process to process, and converting the same data twice should
// give the same bytes.
void serialize(const tf::Example& ex, std::string& out) {
  out.clear();
  google::protobuf::io::StringOutputStream stream{&out};
  google::protobuf::io::CodedOutputStream coded{&stream};
  coded.SetSerializationDeterministic(true);
  ex.SerializeToCodedStream(&coded);
}

tfrecord::compression compression_of(const output_options& o) {
  tfrecord::compression c;
  tfrecord::parse_compression(o.compression, c);
  return c;
}

void report(const std::vector<std::string>& files, int64_t records) {
  std::printf("wrote %lld records to %zu files:\n",
              static_cast<long long>(records), files.size());
  for (auto& f : files)
    std::printf("  %s\n", f.c_str());
}

struct idx_args {
  std::string images, labels;
  std::string format = "jpeg";
  int quality = 90;
  output_options out;
};

int convert_idx(const idx_args& a) {
  idx_reader images, labels;
  if (!images.open(a.images)) {
    std::fprintf(stderr, "actorflow: %s\n", images.error().c_str());
    return exit_usage;
  }
  if (!labels.open(a.labels)) {
    std::fprintf(stderr, "actorflow: %s\n", labels.error().c_str());
    return exit_usage;
  }
  auto shape = images.row_shape();
  if (shape.size() < 2 || shape.size() > 3
      || (shape.size() == 3 && shape[2] != 1 && shape[2] != 3)) {
    std::fprintf(stderr,
                 "actorflow: %s: images must be [n, rows, cols] or [n, "
                 "rows, cols, 1|3]\n",
                 a.images.c_str());
    return exit_usage;
  }
  if (images.rows() != labels.rows() || !labels.row_shape().empty()) {
    std::fprintf(stderr, "actorflow: %s has %lld images, %s has %lld labels\n",
                 a.images.c_str(), static_cast<long long>(images.rows()),
                 a.labels.c_str(), static_cast<long long>(labels.rows()));
    return exit_usage;
  }
  int height = static_cast<int>(shape[0]);
  int width = static_cast<int>(shape[1]);
  int channels = shape.size() == 3 ? static_cast<int>(shape[2]) : 1;
  auto total = images.rows();
  shard_writer out{a.out.prefix, a.out.shards, total, compression_of(a.out)};
  jpeg_codec codec;
  convert_progress progress{total};
  tf::Example ex;
  std::string encoded, serialized;
  for (int64_t done = 0; done < total;) {
    tensor img, lab;
    if (!images.read(1024, img) || !labels.read(1024, lab)) {
      std::fprintf(stderr, "actorflow: %s\n",
                   (images.error().empty() ? labels.error() : images.error())
                     .c_str());
      return exit_failure;
    }
    auto k = img.rows();
    auto row = img.byte_size() / static_cast<size_t>(k);
    for (int64_t i = 0; i < k; ++i, ++done) {
      auto* px = img.data_as<uint8_t>() + static_cast<size_t>(i) * row;
      if (a.format == "jpeg") {
        if (!codec.encode(px, width, height, channels, a.quality, encoded)) {
          std::fprintf(stderr, "actorflow: image %lld: %s\n",
                       static_cast<long long>(done), codec.error().c_str());
          return exit_failure;
        }
      } else {
        encoded.assign(reinterpret_cast<const char*>(px), row);
      }
      ex.Clear();
      set_bytes(ex, "image", encoded);
      set_int64(ex, "label", lab.data_as<uint8_t>()[i]);
      set_int64(ex, "height", height);
      set_int64(ex, "width", width);
      set_int64(ex, "channels", channels);
      serialize(ex, serialized);
      out.write(done, serialized);
      progress.update(done + 1);
    }
  }
  progress.update(total, true);
  report(out.close(), total);
  return 0;
}

struct images_args {
  std::string dir;
  output_options out;
};

int convert_images(const images_args& a) {
  image_folder folder;
  try {
    folder = list_image_folder(a.dir);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "actorflow: %s\n", ex.what());
    return exit_usage;
  }
  auto& classes = folder.classes;
  auto& files = folder.files;
  auto total = static_cast<int64_t>(files.size());
  shard_writer out{a.out.prefix, a.out.shards, total, compression_of(a.out)};
  image_codec codec; // JPEG, PNG or WebP, by content
  convert_progress progress{total};
  tf::Example ex;
  std::string serialized;
  int64_t written = 0, skipped = 0;
  for (int64_t i = 0; i < total; ++i) {
    auto& f = files[static_cast<size_t>(i)];
    std::ifstream in{f.path, std::ios::binary};
    std::stringstream content;
    content << in.rdbuf();
    auto bytes = content.str();
    image_info jinfo;
    if (!in || !codec.header(bytes, jinfo)) {
      spdlog::warn("{}: skipped: {}", f.path,
                   in ? codec.error() : std::string{"cannot read"});
      ++skipped;
      continue;
    }
    ex.Clear();
    set_bytes(ex, "image", std::move(bytes));
    set_int64(ex, "label", f.label);
    set_bytes(ex, "class", classes[static_cast<size_t>(f.label)]);
    set_int64(ex, "height", jinfo.height);
    set_int64(ex, "width", jinfo.width);
    serialize(ex, serialized);
    out.write(written++, serialized);
    progress.update(i + 1);
  }
  progress.update(total, true);
  report(out.close(), written);
  if (skipped > 0)
    std::printf("skipped %lld files that are not JPEG, PNG or WebP images\n",
                static_cast<long long>(skipped));
  return 0;
}

struct csv_args {
  std::vector<std::string> files;
  std::vector<std::string> columns;  // NAME:TYPE[:DEFAULT]
  bool no_header = false;
  std::string delimiter = ",";
  bool skip_bad_rows = false;
  output_options out;
};

struct csv_column {
  std::string name, type;
  size_t position = 0;
  bool has_default = false;
  std::string default_value; // what an empty cell reads as (has_default)
};

bool csv_type(const std::string& t) {
  return t == "int64" || t == "float" || t == "string";
}

// Parses --column NAME:TYPE or NAME:TYPE:DEFAULT (DEFAULT may be empty or
// hold colons). NAME may hold colons too: a spec that ends in ":TYPE" is
// NAME:TYPE, else the first ":TYPE:" ends the name.
bool parse_csv_column(const std::string& spec, csv_column& c) {
  auto last = spec.rfind(':');
  if (last != std::string::npos && last > 0
      && csv_type(spec.substr(last + 1))) {
    c.name = spec.substr(0, last);
    c.type = spec.substr(last + 1);
    return true;
  }
  for (auto at = spec.find(':'); at != std::string::npos;
       at = spec.find(':', at + 1)) {
    auto end = spec.find(':', at + 1);
    if (end == std::string::npos)
      break;
    auto type = spec.substr(at + 1, end - at - 1);
    if (at > 0 && csv_type(type)) {
      c.name = spec.substr(0, at);
      c.type = type;
      c.has_default = true;
      c.default_value = spec.substr(end + 1);
      return true;
    }
  }
  return false;
}

// Adds cell `v` of column `c` to `feats`; the problem, or "".
std::string add_csv_cell(const csv_column& c, const std::string& v,
                         tf::Features& feats) {
  auto& feature = (*feats.mutable_feature())[c.name];
  if (c.type == "int64") {
    int64_t x = 0;
    if (!parse_csv_int64(v, x))
      return "column '" + c.name + "': '" + v + "' is not an int64";
    feature.mutable_int64_list()->add_value(x);
  } else if (c.type == "float") {
    float x = 0;
    if (!parse_csv_float(v, x))
      return "column '" + c.name + "': '" + v + "' is not a float";
    feature.mutable_float_list()->add_value(x);
  } else {
    feature.mutable_bytes_list()->add_value(v);
  }
  return {};
}

int convert_csv(const csv_args& a) {
  std::vector<csv_column> cols;
  for (auto& spec : a.columns) {
    csv_column c;
    if (!parse_csv_column(spec, c)) {
      std::fprintf(stderr,
                   "actorflow: --column %s: expected NAME:TYPE or "
                   "NAME:TYPE:DEFAULT with TYPE int64, float or string\n",
                   spec.c_str());
      return exit_usage;
    }
    tf::Features probe;
    if (c.has_default && c.type != "string"
        && !add_csv_cell(c, c.default_value, probe).empty()) {
      std::fprintf(stderr,
                   "actorflow: --column %s: the default '%s' is not %s\n",
                   spec.c_str(), c.default_value.c_str(),
                   c.type == "int64" ? "an int64" : "a float");
      return exit_usage;
    }
    c.position = cols.size();
    cols.push_back(std::move(c));
  }
  // Two passes: count rows first, so that shards split evenly.
  int64_t total = 0;
  for (int pass = 0; pass < 2; ++pass) {
    std::unique_ptr<shard_writer> out;
    std::unique_ptr<convert_progress> progress;
    if (pass == 1) {
      out = std::make_unique<shard_writer>(a.out.prefix, a.out.shards, total,
                                           compression_of(a.out));
      progress = std::make_unique<convert_progress>(total);
    }
    int64_t written = 0, skipped = 0;
    tf::Example ex;
    std::string serialized;
    for (auto& path : a.files) {
      csv_reader reader;
      if (!reader.open(path, a.delimiter[0])) {
        std::fprintf(stderr, "actorflow: %s\n", reader.error().c_str());
        return exit_usage;
      }
      std::vector<std::string> row;
      int64_t line = 0;
      if (!a.no_header) {
        if (!reader.next(row, line)) {
          std::fprintf(stderr, "actorflow: %s: no header row\n",
                       path.c_str());
          return exit_usage;
        }
        for (auto& c : cols) {
          auto it = std::find(row.begin(), row.end(), c.name);
          if (it == row.end()) {
            std::fprintf(stderr,
                         "actorflow: %s:%lld: the header has no column "
                         "'%s'\n",
                         path.c_str(), static_cast<long long>(line),
                         c.name.c_str());
            return exit_usage;
          }
          c.position = static_cast<size_t>(it - row.begin());
        }
      }
      while (reader.next(row, line)) {
        std::string problem;
        ex.Clear();
        auto& feats = *ex.mutable_features();
        for (auto& c : cols) {
          if (c.position >= row.size()) {
            problem = "row has " + std::to_string(row.size()) + " fields";
            break;
          }
          auto& v = row[c.position];
          problem = add_csv_cell(
            c, v.empty() && c.has_default ? c.default_value : v, feats);
          if (!problem.empty())
            break;
        }
        if (!problem.empty()) {
          if (!a.skip_bad_rows) {
            std::fprintf(stderr, "actorflow: %s:%lld: %s\n", path.c_str(),
                         static_cast<long long>(line), problem.c_str());
            return exit_failure;
          }
          if (pass == 1)
            spdlog::warn("{}:{}: {} (skipped)", path, line, problem);
          ++skipped;
          continue;
        }
        if (pass == 1) {
          serialize(ex, serialized);
          out->write(written, serialized);
          progress->update(written + 1);
        }
        ++written;
      }
      if (!reader.error().empty()) {
        std::fprintf(stderr, "actorflow: %s\n", reader.error().c_str());
        return exit_failure;
      }
    }
    if (pass == 0) {
      total = written;
      continue;
    }
    progress->update(total, true);
    report(out->close(), written);
    if (skipped > 0)
      std::printf("skipped %lld bad rows\n", static_cast<long long>(skipped));
  }
  return 0;
}

} // namespace

void add_convert(CLI::App& app, std::function<int()>& action) {
  auto* convert = app.add_subcommand(
    "convert", "Convert a dataset into TFRecord files of tf.Example records");
  convert->require_subcommand(1);

  auto idx = std::make_shared<idx_args>();
  auto* from_idx = convert->add_subcommand(
    "idx", "IDX images + labels (MNIST, Fashion-MNIST; plain or gzip). "
           "Features: image (bytes), label, height, width, channels (int64)");
  from_idx->add_option("--images", idx->images, "IDX image file")
    ->required();
  from_idx->add_option("--labels", idx->labels, "IDX label file")
    ->required();
  from_idx->add_option("--format", idx->format,
                       "How images are stored: jpeg or raw (u8 pixels)")
    ->check(CLI::IsMember({"jpeg", "raw"}))
    ->capture_default_str();
  from_idx->add_option("--quality", idx->quality, "JPEG quality")
    ->check(CLI::Range(1, 100))
    ->capture_default_str();
  add_output_options(*from_idx, idx->out);
  from_idx->callback([idx, &action] { action = [idx] { return convert_idx(*idx); }; });

  auto img = std::make_shared<images_args>();
  auto* from_images = convert->add_subcommand(
    "images", "An image folder DIR/CLASS/FILE of JPEG, PNG or WebP images "
              "(by content; other files are skipped). Features: image (the "
              "file's bytes), label (class index, classes sorted by name), "
              "class (bytes), height, width (int64)");
  from_images->add_option("dir", img->dir, "Folder with one subfolder per "
                                           "class")
    ->required();
  add_output_options(*from_images, img->out);
  auto csv = std::make_shared<csv_args>();
  auto* from_csv = convert->add_subcommand(
    "csv", "CSV files with a header row (or --no-header). One feature per "
           "--column NAME:TYPE (int64, float or string -> bytes)");
  from_csv->add_option("files", csv->files, "CSV files")->required();
  from_csv->add_option("--column", csv->columns,
                       "A column to convert, NAME:TYPE (repeat); "
                       "NAME:TYPE:DEFAULT reads its empty cells as DEFAULT, "
                       "e.g. I1:float:0 (without: a bad row for int64 and "
                       "float, \"\" for string)")
    ->required();
  from_csv->add_flag("--no-header", csv->no_header,
                     "The first row is data; --column names are positional");
  from_csv->add_option("--delimiter", csv->delimiter, "Field delimiter")
    ->check([](const std::string& d) {
      return d.size() == 1 ? std::string{} : std::string{"one character"};
    })
    ->capture_default_str();
  from_csv->add_flag("--skip-bad-rows", csv->skip_bad_rows,
                     "Skip (and count) rows that do not fit instead of "
                     "stopping");
  add_output_options(*from_csv, csv->out);
  from_csv->callback(
    [csv, &action] { action = [csv] { return convert_csv(*csv); }; });

  from_images->callback(
    [img, &action] { action = [img] { return convert_images(*img); }; });
}

} // namespace af::cli
