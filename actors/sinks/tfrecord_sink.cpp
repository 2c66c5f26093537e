// tfrecord_sink: writes every record it receives as a tf.Example into
// TFRecord files, so that a preprocessed dataset is made once and read back
// by tfrecord_source + example_parse, or by TensorFlow. Declared in
// actors/sinks/tfrecord_sink.hpp.
#include "actorflow/actors/sinks/tfrecord_sink.hpp"

#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "actorflow/proto/example.pb.h"
#include "actorflow/runtime/core/rows.hpp"
#include "actorflow/runtime/formats/tfrecord_writer.hpp"
#include "actorflow/runtime/state/state_io.hpp"
#include "actorflow/runtime/topology/topology.hpp"

namespace af {

namespace fs = std::filesystem;

std::string tfrecord_sink_file(const std::string& path, uint32_t replica,
                               uint64_t file, bool gzip) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "-%05u-%05llu.tfrecord%s", replica,
                static_cast<unsigned long long>(file), gzip ? ".gz" : "");
  return path + buf;
}

namespace {

struct tfrecord_sink_config {
  std::string path;                // output prefix; required
  std::vector<std::string> fields; // empty: all but key, index, companions
  int64_t records_per_file = 0;    // 0: no limit
  bool gzip = false;
};

tfrecord_sink_config tfrecord_sink_config_of(const topology::Stage& s) {
  auto& p = s.tfrecord_sink();
  tfrecord_sink_config c;
  c.path = p.path();
  c.fields.assign(p.fields().begin(), p.fields().end());
  c.records_per_file = p.records_per_file();
  c.gzip = p.compression() == "gzip";
  return c;
}

class tfrecord_sink : public stage_logic {
public:
  tfrecord_sink(const stage_info& info, tfrecord_sink_config cfg)
    : cfg_(std::move(cfg)), replica_(info.replica), label_(info.label()) {}

  void process(batch&& item, emitter&) override {
    auto n = item.records();
    if (n == 0)
      return;
    check_rows(item);
    auto plan = plan_of(item);
    for (int64_t i = 0; i < n; ++i) {
      example_.Clear();
      auto& map = *example_.mutable_features()->mutable_feature();
      for (auto& w : plan)
        put(item, w, i, map[item.fields[w.field].name]);
      if (!writer_)
        open_next();
      example_.SerializeToString(&scratch_);
      if (!writer_->write(scratch_))
        throw std::runtime_error(writer_->error());
      ++records_;
      if (cfg_.records_per_file > 0
          && static_cast<int64_t>(writer_->records()) >= cfg_.records_per_file)
        close_file();
    }
  }

  void finish(emitter&) override {
    close_file();
    spdlog::info("{}: wrote {} records in {} files ({}-{:05}-*)", label_,
                 records_, files_done_, cfg_.path, replica_);
  }

  // Checkpoints: what came before the barrier is in complete files.
  uint64_t quiesce() override {
    close_file();
    return 0;
  }

  std::string snapshot() const override {
    return save_state("tfrecord_sink/1", files_done_, records_);
  }

  void restore(const std::string& state) override {
    uint64_t files = 0, records = 0;
    load_state(state, "tfrecord_sink/1", files, records);
    // Files of this replica numbered from `files` on came after the
    // checkpoint: the resumed job writes their records again.
    for (auto& f : own_files())
      if (f.number >= files) {
        std::error_code ec;
        fs::remove(f.path, ec);
        if (ec)
          throw std::runtime_error("tfrecord_sink: cannot remove " + f.path
                                   + " (written after the checkpoint): "
                                   + ec.message());
      }
    files_done_ = files;
    records_ = records;
    restored_ = true;
  }

private:
  // One field to write: its index in the item, and its lengths' or -1.
  struct field_plan {
    size_t field;
    int lengths;
  };

  std::vector<field_plan> plan_of(const batch& item) const {
    std::vector<std::string> names = cfg_.fields;
    if (names.empty())
      for (auto& f : item.fields) {
        auto& name = f.name;
        // "X_length" of a field X that is written cut to its lengths.
        const tensor* x = nullptr;
        if (name.size() > 7 && name.compare(name.size() - 7, 7, "_length") == 0)
          x = item.find(name.substr(0, name.size() - 7));
        bool companion = x != nullptr && x->type() != dtype::bytes
                         && x->shape().size() >= 2;
        if (name != "key" && name != "index" && !companion)
          names.push_back(name);
      }
    std::vector<field_plan> plan;
    for (auto& name : names) {
      size_t k = 0;
      while (k < item.fields.size() && item.fields[k].name != name)
        ++k;
      if (k == item.fields.size())
        throw std::runtime_error("tfrecord_sink: no field '" + name
                                 + "' to write (the item has "
                                 + field_list(item) + ")");
      auto& t = item.fields[k].value;
      auto type = t.type();
      if (type != dtype::bytes && type != dtype::f32 && type != dtype::i64
          && type != dtype::i32 && type != dtype::u8)
        throw std::runtime_error(
          "tfrecord_sink: field '" + name + "' is " + to_string(t)
          + "; a tf.Example holds bytes, f32 and integers exactly (cast it "
            "first)");
      int lengths = -1;
      if (t.shape().size() >= 2 && type != dtype::bytes)
        for (size_t j = 0; j < item.fields.size(); ++j)
          if (item.fields[j].name == name + "_length"
              && item.fields[j].value.type() == dtype::i64
              && item.fields[j].value.shape().size() == 1)
            lengths = static_cast<int>(j);
      plan.push_back({k, lengths});
    }
    return plan;
  }

  static std::string field_list(const batch& item) {
    std::string s;
    for (auto& f : item.fields)
      s += (s.empty() ? "" : ", ") + f.name;
    return s.empty() ? "no fields" : s;
  }

  // Record `i` of field `w` into `out`.
  void put(const batch& item, const field_plan& w, int64_t i,
           tf::Feature& out) const {
    auto& f = item.fields[w.field];
    auto& t = f.value;
    int64_t per_row = t.rows() == 0 ? 0 : t.elements() / t.rows();
    int64_t count = per_row;
    if (w.lengths >= 0) {
      auto l = item.fields[static_cast<size_t>(w.lengths)]
                 .value.data_as<int64_t>()[i];
      int64_t step = 1; // values per step of the length
      for (size_t d = 2; d < t.shape().size(); ++d)
        step *= t.shape()[d];
      if (l < 0 || l > t.shape()[1])
        throw std::runtime_error("tfrecord_sink: field '" + f.name
                                 + "_length' gives a record " + std::to_string(l)
                                 + " values, field '" + f.name + "' holds "
                                 + std::to_string(t.shape()[1]));
      count = l * step;
    }
    auto from = i * per_row;
    switch (t.type()) {
      case dtype::bytes: {
        auto* list = out.mutable_bytes_list();
        for (int64_t k = 0; k < count; ++k) {
          auto s = t.string_at(from + k);
          list->add_value(s.data(), s.size());
        }
        break;
      }
      case dtype::f32: {
        auto* v = out.mutable_float_list()->mutable_value();
        auto* p = t.data_as<float>() + from;
        v->Add(p, p + count);
        break;
      }
      case dtype::i64: {
        auto* v = out.mutable_int64_list()->mutable_value();
        auto* p = t.data_as<int64_t>() + from;
        v->Add(p, p + count);
        break;
      }
      case dtype::i32: {
        auto* v = out.mutable_int64_list();
        for (auto* p = t.data_as<int32_t>() + from, *e = p + count; p != e; ++p)
          v->add_value(*p);
        break;
      }
      default: { // u8
        auto* v = out.mutable_int64_list();
        for (auto* p = t.data_as<uint8_t>() + from, *e = p + count; p != e; ++p)
          v->add_value(*p);
        break;
      }
    }
  }

  struct own_file {
    std::string path;
    uint64_t number;
  };

  // This replica's files (and leftover temporaries) under cfg_.path.
  std::vector<own_file> own_files() const {
    std::vector<own_file> out;
    fs::path prefix{cfg_.path};
    auto dir = prefix.has_parent_path() ? prefix.parent_path() : fs::path{"."};
    char head[32];
    std::snprintf(head, sizeof head, "-%05u-", replica_);
    auto stem = prefix.filename().string() + head;
    std::error_code ec;
    for (auto& e : fs::directory_iterator(dir, ec)) {
      auto name = e.path().filename().string();
      if (name.compare(0, stem.size(), stem) != 0)
        continue;
      auto rest = name.substr(stem.size());
      auto digits = rest.find_first_not_of("0123456789");
      if (digits == 0 || digits == std::string::npos || digits > 18
          || rest.compare(digits, 9, ".tfrecord") != 0)
        continue;
      out.push_back({e.path().string(), std::stoull(rest.substr(0, digits))});
    }
    return out;
  }

  void open_next() {
    if (files_done_ == 0 && !restored_ && !checked_) {
      auto old = own_files();
      if (!old.empty())
        throw std::runtime_error(
          "tfrecord_sink: " + old.front().path
          + " exists, from an earlier run; remove this replica's files or "
            "choose another path");
    }
    checked_ = true;
    auto name = tfrecord_sink_file(cfg_.path, replica_, files_done_, cfg_.gzip);
    writer_ = std::make_unique<tfrecord_writer>();
    if (!writer_->open(name, cfg_.gzip ? tfrecord::compression::gzip
                                       : tfrecord::compression::none))
      throw std::runtime_error(writer_->error());
  }

  void close_file() {
    if (!writer_)
      return;
    if (!writer_->close())
      throw std::runtime_error(writer_->error());
    writer_.reset();
    ++files_done_;
  }

  tfrecord_sink_config cfg_;
  uint32_t replica_;
  std::string label_;
  std::unique_ptr<tfrecord_writer> writer_; // null: no file open
  uint64_t files_done_ = 0;
  uint64_t records_ = 0;
  bool restored_ = false;
  bool checked_ = false; // looked for an earlier run's files
  tf::Example example_;
  std::string scratch_;
};

std::string check_tfrecord_sink(const topology::Stage& s) {
  auto& p = s.tfrecord_sink();
  if (p.records_per_file() < 0)
    return "tfrecord_sink.records_per_file must be >= 0, got "
           + std::to_string(p.records_per_file());
  if (!p.compression().empty() && p.compression() != "none"
      && p.compression() != "gzip")
    return "tfrecord_sink.compression must be \"none\" or \"gzip\", got \""
           + p.compression() + "\"";
  auto dir = fs::path{p.path()}.parent_path();
  std::error_code ec;
  // (On a node the directory is that machine's: checked when it opens.)
  if (s.hosts().empty() && !dir.empty() && !fs::is_directory(dir, ec))
    return "tfrecord_sink.path: directory " + dir.string()
           + " does not exist";
  return {};
}

} // namespace

stage_type tfrecord_sink_type() {
  stage_type t;
  t.name = "tfrecord_sink";
  t.kind = stage_kind::sink;
  t.blocking = true;
  t.description = "writes records as tf.Examples into TFRecord files";
  t.config_block = "tfrecord_sink";
  t.config_required = {"path"};
  t.check = check_tfrecord_sink;
  t.make = [](const stage_info& info, const topology::Stage& s) {
    return std::make_shared<tfrecord_sink>(info, tfrecord_sink_config_of(s));
  };
  return t;
}

} // namespace af
