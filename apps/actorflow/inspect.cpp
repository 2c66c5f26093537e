// `actorflow inspect`: what a TFRecord file holds, and whether every record
// is intact. Declared in apps/actorflow/inspect.hpp.
#include "apps/actorflow/inspect.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>

#include <google/protobuf/stubs/strutil.h>
#include <nlohmann/json.hpp>

#include "actorflow/proto/example.pb.h"
#include "actorflow/runtime/formats/tfrecord_reader.hpp"

namespace af::cli {

namespace {

using json = nlohmann::ordered_json;

struct inspect_args {
  std::string file;
  std::string show = "3";
  bool json = false;
  std::string compression = "auto";
};

// JSON has no NaN or infinities: inspect writes them as these strings.
const char* nonfinite_name(float v) {
  if (std::isnan(v))
    return "nan";
  if (std::isinf(v))
    return v > 0 ? "inf" : "-inf";
  return nullptr;
}

// 9 significant digits: enough to read the same float back.
std::string float_digits(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

std::string float_text(float v) {
  if (auto* name = nonfinite_name(v))
    return std::string{"\""} + name + "\"";
  return float_digits(v);
}

json float_json(float v) {
  if (auto* name = nonfinite_name(v))
    return name;
  // The double nearest float_digits(v), which JSON prints with those digits.
  return std::strtod(float_digits(v).c_str(), nullptr);
}

json feature_json(const tf::Feature& f) {
  switch (f.kind_case()) {
    case tf::Feature::kBytesList: {
      auto values = json::array();
      for (auto& v : f.bytes_list().value()) {
        std::string b64;
        google::protobuf::Base64Escape(v, &b64);
        values.push_back(std::move(b64));
      }
      return {{"bytes_list", std::move(values)}};
    }
    case tf::Feature::kFloatList: {
      auto values = json::array();
      for (auto v : f.float_list().value())
        values.push_back(float_json(v));
      return {{"float_list", std::move(values)}};
    }
    case tf::Feature::kInt64List: {
      auto values = json::array();
      for (auto v : f.int64_list().value())
        values.push_back(v);
      return {{"int64_list", std::move(values)}};
    }
    default:
      return json::object();
  }
}

// `j` on one line, with a space after every comma and colon (the layout
// inspect --json has always printed, which tests and docs quote).
std::string json_line(const json& j) {
  if (j.is_object() || j.is_array()) {
    std::string out = j.is_object() ? "{" : "[";
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it != j.begin())
        out += ", ";
      if (j.is_object())
        out += json_line(it.key()) + ": ";
      out += json_line(it.value());
    }
    return out + (j.is_object() ? "}" : "]");
  }
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Sorted by name so that output does not depend on map order.
std::map<std::string, const tf::Feature*> sorted(const tf::Example& ex) {
  std::map<std::string, const tf::Feature*> out;
  for (auto& [name, f] : ex.features().feature())
    out[name] = &f;
  return out;
}

std::string summary(const tf::Feature& f) {
  switch (f.kind_case()) {
    case tf::Feature::kBytesList: {
      std::string s = "bytes x" + std::to_string(f.bytes_list().value_size());
      if (f.bytes_list().value_size() == 1)
        s += " (" + std::to_string(f.bytes_list().value(0).size())
             + " bytes)";
      return s;
    }
    case tf::Feature::kFloatList: {
      std::string s = "float x" + std::to_string(f.float_list().value_size());
      if (f.float_list().value_size() <= 4) {
        s += " [";
        for (int i = 0; i < f.float_list().value_size(); ++i)
          s += (i ? ", " : "") + float_text(f.float_list().value(i));
        s += "]";
      }
      return s;
    }
    case tf::Feature::kInt64List: {
      std::string s = "int64 x" + std::to_string(f.int64_list().value_size());
      if (f.int64_list().value_size() <= 4) {
        s += " [";
        for (int i = 0; i < f.int64_list().value_size(); ++i)
          s += (i ? ", " : "") + std::to_string(f.int64_list().value(i));
        s += "]";
      }
      return s;
    }
    default:
      return "empty";
  }
}

struct feature_stats {
  std::string kind;
  int64_t min_values = INT64_MAX;
  int64_t max_values = 0;
  int64_t records = 0;
};

int run_inspect(const inspect_args& a) {
  tfrecord_read_options opts;
  tfrecord::parse_compression(a.compression, opts.compression);
  tfrecord_reader reader;
  if (!reader.open(a.file, opts)) {
    std::fprintf(stderr, "actorflow: %s\n", reader.error().c_str());
    return 2;
  }
  int64_t show = a.show == "all" ? INT64_MAX : std::stoll(a.show);
  std::string rec;
  int64_t records = 0, corrupt = 0, not_examples = 0;
  uint64_t bytes = 0;
  std::map<std::string, feature_stats> features;
  tf::Example ex;
  for (;;) {
    auto st = reader.next(rec);
    if (st == read_status::end)
      break;
    if (st != read_status::ok) {
      ++corrupt;
      std::fprintf(stderr, "%s\n", reader.error().c_str());
      if (recoverable(st))
        continue;
      break;
    }
    auto index = records++;
    bytes += rec.size();
    bool parsed = ex.ParseFromString(rec);
    if (!parsed) {
      ++not_examples;
      if (!a.json && index < show)
        std::printf("record %lld @%llu: %zu bytes, not a tf.Example\n",
                    static_cast<long long>(index),
                    static_cast<unsigned long long>(reader.record_offset()),
                    rec.size());
      continue;
    }
    auto fs = sorted(ex);
    for (auto& [name, f] : fs) {
      auto& s = features[name];
      auto kind = summary(*f).substr(0, summary(*f).find(' '));
      s.kind = s.kind.empty() || s.kind == kind ? kind : "mixed";
      int64_t n = f->bytes_list().value_size() + f->float_list().value_size()
                  + f->int64_list().value_size();
      s.min_values = std::min(s.min_values, n);
      s.max_values = std::max(s.max_values, n);
      ++s.records;
    }
    if (index >= show)
      continue;
    if (a.json) {
      json features_json = json::object();
      for (auto& [name, f] : fs)
        features_json[name] = feature_json(*f);
      json line = {{"index", index},
                   {"offset", reader.record_offset()},
                   {"features", std::move(features_json)}};
      std::printf("%s\n", json_line(line).c_str());
    } else {
      std::printf("record %lld @%llu:\n", static_cast<long long>(index),
                  static_cast<unsigned long long>(reader.record_offset()));
      for (auto& [name, f] : fs)
        std::printf("  %-16s %s\n", name.c_str(), summary(*f).c_str());
    }
  }
  if (!a.json) {
    std::printf("%s: %lld records, %llu payload bytes, %s\n", a.file.c_str(),
                static_cast<long long>(records),
                static_cast<unsigned long long>(bytes),
                reader.compressed() ? "gzip" : "uncompressed");
    if (!features.empty()) {
      std::printf("features:\n");
      for (auto& [name, s] : features) {
        auto values = s.min_values == s.max_values
                        ? std::to_string(s.min_values)
                        : std::to_string(s.min_values) + ".."
                            + std::to_string(s.max_values);
        std::printf("  %-16s %-6s %s values, in %lld records\n",
                    name.c_str(), s.kind.c_str(), values.c_str(),
                    static_cast<long long>(s.records));
      }
    }
    if (not_examples > 0)
      std::printf("%lld records are not tf.Example records\n",
                  static_cast<long long>(not_examples));
    std::printf("CRC check: %s\n",
                corrupt == 0 ? "every record is intact"
                             : (std::to_string(corrupt) + " corrupt").c_str());
  }
  return corrupt == 0 ? 0 : 1;
}

} // namespace

void add_inspect(CLI::App& app, std::function<int()>& action) {
  auto a = std::make_shared<inspect_args>();
  auto* cmd = app.add_subcommand(
    "inspect", "Show what a TFRecord file holds and check every record's "
               "CRCs (exit 1 if any is corrupt)");
  cmd->add_option("file", a->file, "TFRecord file")->required();
  cmd->add_option("--show", a->show, "Records to print: a number or all")
    ->capture_default_str()
    ->check([](const std::string& v) -> std::string {
      if (v == "all")
        return {};
      try {
        return std::stoll(v) >= 0 ? "" : "must be >= 0";
      } catch (...) {
        return "must be a number or 'all'";
      }
    });
  cmd->add_flag("--json", a->json,
                "Print records as JSON lines (bytes in base64) and no "
                "summary");
  cmd->add_option("--compression", a->compression, "auto, none or gzip")
    ->check(CLI::IsMember({"auto", "none", "gzip"}))
    ->capture_default_str();
  cmd->callback([a, &action] { action = [a] { return run_inspect(*a); }; });
}

} // namespace af::cli
