// example_parse: parses serialized tf.Example records (proto/example.proto,
// wire-compatible with TensorFlow's) and emits one field per declared
// feature: float -> f32, int64 -> i64, bytes -> bytes. Declared in
// actors/features/example_parse.hpp.
#include "actorflow/actors/features/example_parse.hpp"

#include <algorithm>
#include <cstring>
#include <set>
#include <stdexcept>

#include <google/protobuf/io/coded_stream.h>

#include "actorflow/proto/example.pb.h"

namespace af {

namespace {

namespace pbio = google::protobuf::io;

enum class feature_type { bytes, floats, int64s };

struct feature_spec {
  std::string name;
  feature_type type;
  std::vector<int64_t> shape;
  int64_t values = 1;  // per record; var_len: any number
  bool var_len = false;
};

// A var_len feature's values of one item, back to back, and each record's
// count.
struct ragged {
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::vector<int64_t> lengths;
};

const char* type_name(feature_type t) {
  switch (t) {
    case feature_type::bytes:
      return "bytes";
    case feature_type::floats:
      return "float";
    case feature_type::int64s:
      return "int64";
  }
  return "?";
}

const char* kind_name(tf::Feature::KindCase k) {
  switch (k) {
    case tf::Feature::kBytesList:
      return "bytes";
    case tf::Feature::kFloatList:
      return "float";
    case tf::Feature::kInt64List:
      return "int64";
    default:
      return "no";
  }
}

struct parse_config {
  std::string input = "record"; // the field of serialized tf.Examples
  bool keep_input = false; // keep that field in the output
  std::vector<feature_spec> features; // required, at least one
};

parse_config example_parse_config_of(const topology::Stage& s) {
  auto& p = s.example_parse();
  parse_config c;
  if (!p.input().empty())
    c.input = p.input();
  c.keep_input = p.keep_input();
  for (auto& f : p.feature()) {
    feature_spec spec;
    spec.name = f.name();
    spec.type = f.type() == "bytes"   ? feature_type::bytes
                : f.type() == "float" ? feature_type::floats
                                      : feature_type::int64s;
    spec.shape.assign(f.shape().begin(), f.shape().end());
    for (auto d : spec.shape)
      spec.values *= d;
    spec.var_len = f.var_len();
    c.features.push_back(std::move(spec));
  }
  return c;
}

class example_parse : public stage_logic {
public:
  explicit example_parse(parse_config cfg)
    : input_(std::move(cfg.input)), keep_input_(cfg.keep_input),
      specs_(std::move(cfg.features)) {
    found_.resize(specs_.size());
    varying_.resize(specs_.size());
  }

  void process(batch&& item, emitter& out) override {
    auto& records = item.at(input_);
    if (records.type() != dtype::bytes)
      throw std::runtime_error("field '" + input_ + "' is "
                               + to_string(records) + ", not bytes");
    auto n = records.elements();
    auto* keys = item.find("key");
    // Output buffers, one per feature.
    std::vector<tensor> fixed(specs_.size());
    // Var_len features, gathered before their width is known (kept
    // between items, so their buffers are allocated once).
    auto& varying = varying_;
    for (auto& v : varying) {
      v.ints.clear();
      v.floats.clear();
      v.lengths.clear();
    }
    // The serialized records bound the strings they hold.
    std::vector<bytes_builder> strings;
    for (size_t k = 0; k < specs_.size(); ++k)
      if (specs_[k].type == feature_type::bytes)
        strings.emplace_back(records.byte_size() / bytes_features(),
                             static_cast<size_t>(n * specs_[k].values));
      else
        strings.emplace_back();
    for (size_t k = 0; k < specs_.size(); ++k) {
      auto& spec = specs_[k];
      auto shape = spec.shape;
      shape.insert(shape.begin(), n);
      if (spec.var_len)
        varying[k].lengths.reserve(static_cast<size_t>(n));
      else if (spec.type == feature_type::floats)
        fixed[k] = tensor::allocate(dtype::f32, shape);
      else if (spec.type == feature_type::int64s)
        fixed[k] = tensor::allocate(dtype::i64, shape);
    }
    for (int64_t i = 0; i < n; ++i) {
      auto rec = records.string_at(i);
      auto where = [&] {
        return keys != nullptr && keys->type() == dtype::bytes
                 ? std::string{keys->string_at(i)}
                 : "record " + std::to_string(i) + " of item "
                     + std::to_string(item.seq);
      };
      if (fast_extract(rec)) {
        commit_fast(i, fixed, strings, varying);
        continue;
      }
      // Anything unusual (or wrong) goes through the full protobuf parser,
      // which also words the errors.
      example_.Clear();
      if (!example_.ParseFromArray(rec.data(), static_cast<int>(rec.size())))
        throw std::runtime_error(where() + ": not a tf.Example record");
      auto& map = example_.features().feature();
      for (size_t k = 0; k < specs_.size(); ++k) {
        auto& spec = specs_[k];
        auto it = map.find(spec.name);
        if (it == map.end() && spec.var_len) {
          varying[k].lengths.push_back(0); // as tf's VarLenFeature: none
          continue;
        }
        if (it == map.end())
          throw std::runtime_error(where() + ": feature '" + spec.name
                                   + "' is missing");
        auto& f = it->second;
        if (spec.var_len && f.kind_case() == tf::Feature::KIND_NOT_SET) {
          varying[k].lengths.push_back(0);
          continue;
        }
        auto expected = spec.type == feature_type::bytes
                          ? tf::Feature::kBytesList
                        : spec.type == feature_type::floats
                          ? tf::Feature::kFloatList
                          : tf::Feature::kInt64List;
        if (f.kind_case() != expected)
          throw std::runtime_error(where() + ": feature '" + spec.name
                                   + "' holds " + kind_name(f.kind_case())
                                   + " values, declared "
                                   + type_name(spec.type));
        int64_t count = spec.type == feature_type::bytes
                          ? f.bytes_list().value_size()
                        : spec.type == feature_type::floats
                          ? f.float_list().value_size()
                          : f.int64_list().value_size();
        if (spec.var_len) {
          auto& v = varying[k];
          v.lengths.push_back(count);
          if (spec.type == feature_type::floats)
            v.floats.insert(v.floats.end(), f.float_list().value().begin(),
                            f.float_list().value().end());
          else
            v.ints.insert(v.ints.end(), f.int64_list().value().begin(),
                          f.int64_list().value().end());
          continue;
        }
        if (count != spec.values)
          throw std::runtime_error(where() + ": feature '" + spec.name
                                   + "' has " + std::to_string(count)
                                   + " values, its declared shape needs "
                                   + std::to_string(spec.values));
        auto at = static_cast<size_t>(i * spec.values);
        if (spec.type == feature_type::floats)
          std::memcpy(fixed[k].mutable_data_as<float>() + at,
                      f.float_list().value().data(), count * sizeof(float));
        else if (spec.type == feature_type::int64s)
          std::memcpy(fixed[k].mutable_data_as<int64_t>() + at,
                      f.int64_list().value().data(), count * sizeof(int64_t));
        else
          for (auto& v : f.bytes_list().value())
            strings[k].add(v);
      }
    }
    batch result;
    result.seq = item.seq;
    result.epoch = item.epoch;
    for (size_t k = 0; k < specs_.size(); ++k) {
      auto& spec = specs_[k];
      if (spec.var_len) {
        padded(spec, varying[k], result);
      } else if (spec.type == feature_type::bytes) {
        auto flat = strings[k].finish();
        auto shape = spec.shape;
        shape.insert(shape.begin(), n);
        result.set(spec.name, tensor{dtype::bytes, shape, flat.storage()});
      } else {
        result.set(spec.name, std::move(fixed[k]));
      }
    }
    for (auto& f : item.fields)
      if ((f.name != input_ || keep_input_) && result.find(f.name) == nullptr)
        result.fields.push_back(std::move(f));
    out.push(std::move(result));
  }

private:
  // The fast path: reads the wire format with protobuf's CodedInputStream
  // and keeps views of the declared features only, without building an
  // Example (the full parse costs more than decoding a 28x28 JPEG). It
  // gives up, leaving the record to the full parser, on anything but the
  // plain encoding: a missing, repeated or mistyped feature, a repeated
  // `features` field, unknown fields inside a feature.
  struct found_feature {
    bool seen = false;
    std::vector<std::string_view> bytes;
    std::string_view packed;           // floats: packed little-endian
    std::vector<int64_t> ints;
  };

  // A length-delimited field's bytes as a view into `whole` (the buffer
  // `in` reads), skipping past them.
  static bool take_view(pbio::CodedInputStream& in, std::string_view whole,
                        std::string_view& out) {
    uint32_t len = 0;
    if (!in.ReadVarint32(&len))
      return false;
    auto at = static_cast<size_t>(in.CurrentPosition());
    if (len > whole.size() - at || !in.Skip(static_cast<int>(len)))
      return false;
    out = whole.substr(at, len);
    return true;
  }

  // Reads one Feature (its limit pushed on `in`) of the declared kind.
  static bool read_feature(pbio::CodedInputStream& in, std::string_view rec,
                           const feature_spec& spec, found_feature& f) {
    uint32_t want = spec.type == feature_type::bytes    ? 1
                    : spec.type == feature_type::floats ? 2
                                                        : 3;
    bool got_list = false;
    while (uint32_t tag = in.ReadTag()) {
      uint32_t len = 0;
      if ((tag >> 3) != want || (tag & 7) != 2 || got_list
          || !in.ReadVarint32(&len))
        return false;
      got_list = true;
      auto list = in.PushLimit(static_cast<int>(len));
      while (uint32_t t = in.ReadTag()) {
        std::string_view v;
        if (t != ((1u << 3) | 2) || !take_view(in, rec, v))
          return false;  // unpacked numbers and the like: full parser
        if (spec.type == feature_type::bytes) {
          f.bytes.push_back(v);
        } else if (spec.type == feature_type::floats) {
          if (!f.packed.empty() || v.size() % 4 != 0)
            return false;
          f.packed = v;
        } else {
          pbio::CodedInputStream vi{reinterpret_cast<const uint8_t*>(v.data()),
                                    static_cast<int>(v.size())};
          uint64_t x;
          while (vi.CurrentPosition() < static_cast<int>(v.size())) {
            if (!vi.ReadVarint64(&x))
              return false;
            f.ints.push_back(static_cast<int64_t>(x));
          }
        }
      }
      if (in.BytesUntilLimit() != 0)
        return false;
      in.PopLimit(list);
    }
    return got_list && in.BytesUntilLimit() == 0;
  }

  // One CodedInputStream walks the record; nested messages are limits on
  // it, not streams of their own.
  bool fast_extract(std::string_view rec) {
    for (auto& f : found_) {
      f.seen = false;
      f.bytes.clear();
      f.packed = {};
      f.ints.clear();
    }
    constexpr uint32_t field1 = (1u << 3) | 2, field2 = (2u << 3) | 2;
    pbio::CodedInputStream in{reinterpret_cast<const uint8_t*>(rec.data()),
                              static_cast<int>(rec.size())};
    bool got_features = false;
    while (uint32_t tag = in.ReadTag()) {
      uint32_t len = 0;
      if (tag != field1 || got_features || !in.ReadVarint32(&len))
        return false;
      got_features = true;
      auto features = in.PushLimit(static_cast<int>(len));
      while (uint32_t t = in.ReadTag()) {
        uint32_t entry_len = 0;
        if (t != field1 || !in.ReadVarint32(&entry_len))
          return false;
        auto entry = in.PushLimit(static_cast<int>(entry_len));
        // Map entry: key (1) then value (2); anything else goes the long way.
        std::string_view key;
        uint32_t value_len = 0;
        if (in.ReadTag() != field1 || !take_view(in, rec, key)
            || in.ReadTag() != field2 || !in.ReadVarint32(&value_len))
          return false;
        size_t k = 0;
        while (k < specs_.size() && specs_[k].name != key)
          ++k;
        if (k == specs_.size()) {
          if (!in.Skip(static_cast<int>(value_len)))
            return false;
        } else {
          auto value = in.PushLimit(static_cast<int>(value_len));
          if (found_[k].seen || !read_feature(in, rec, specs_[k], found_[k]))
            return false;
          in.PopLimit(value);
          found_[k].seen = true;
        }
        if (in.ReadTag() != 0 || in.BytesUntilLimit() != 0)
          return false;
        in.PopLimit(entry);
      }
      if (in.BytesUntilLimit() != 0)
        return false;
      in.PopLimit(features);
    }
    if (in.CurrentPosition() != static_cast<int>(rec.size()))
      return false;
    for (size_t k = 0; k < specs_.size(); ++k) {
      auto& f = found_[k];
      int64_t count = specs_[k].type == feature_type::bytes
                        ? static_cast<int64_t>(f.bytes.size())
                      : specs_[k].type == feature_type::floats
                        ? static_cast<int64_t>(f.packed.size() / 4)
                        : static_cast<int64_t>(f.ints.size());
      if (specs_[k].var_len)
        continue; // any count; unseen: none
      if (!f.seen || count != specs_[k].values)
        return false;
    }
    return true;
  }

  void commit_fast(int64_t i, std::vector<tensor>& fixed,
                   std::vector<bytes_builder>& strings,
                   std::vector<ragged>& varying) {
    for (size_t k = 0; k < specs_.size(); ++k) {
      auto& spec = specs_[k];
      auto at = static_cast<size_t>(i * spec.values);
      auto& f = found_[k];
      if (spec.var_len) {
        auto& v = varying[k];
        if (spec.type == feature_type::floats) {
          auto count = f.packed.size() / sizeof(float);
          v.lengths.push_back(static_cast<int64_t>(count));
          auto old = v.floats.size();
          v.floats.resize(old + count);
          if (count > 0)
            std::memcpy(v.floats.data() + old, f.packed.data(),
                        f.packed.size());
        } else {
          v.lengths.push_back(static_cast<int64_t>(f.ints.size()));
          v.ints.insert(v.ints.end(), f.ints.begin(), f.ints.end());
        }
      } else if (spec.type == feature_type::floats)
        std::memcpy(fixed[k].mutable_data_as<float>() + at, f.packed.data(),
                    f.packed.size());
      else if (spec.type == feature_type::int64s)
        std::memcpy(fixed[k].mutable_data_as<int64_t>() + at, f.ints.data(),
                    f.ints.size() * sizeof(int64_t));
      else
        for (auto v : f.bytes)
          strings[k].add(v);
    }
  }

  // A var_len feature's values as [n, L] (L: the longest record, the rest
  // zeros) and its lengths as "<name>_length" [n].
  static void padded(const feature_spec& spec, ragged& v, batch& out) {
    auto n = static_cast<int64_t>(v.lengths.size());
    int64_t width = 0;
    for (auto l : v.lengths)
      width = std::max(width, l);
    auto fill = [&](auto* dst, const auto& src) {
      size_t from = 0;
      for (int64_t i = 0; i < n; ++i) {
        auto len = static_cast<size_t>(v.lengths[static_cast<size_t>(i)]);
        std::copy_n(src.begin() + static_cast<std::ptrdiff_t>(from), len,
                    dst + i * width);
        std::fill(dst + i * width + static_cast<int64_t>(len),
                  dst + (i + 1) * width, 0);
        from += len;
      }
    };
    tensor values;
    if (spec.type == feature_type::floats) {
      values = tensor::allocate(dtype::f32, {n, width});
      fill(values.mutable_data_as<float>(), v.floats);
    } else {
      values = tensor::allocate(dtype::i64, {n, width});
      fill(values.mutable_data_as<int64_t>(), v.ints);
    }
    auto lengths = tensor::allocate(dtype::i64, {n});
    std::copy(v.lengths.begin(), v.lengths.end(),
              lengths.mutable_data_as<int64_t>());
    out.set(spec.name, std::move(values));
    out.set(spec.name + "_length", std::move(lengths));
  }

  // How many declared features are bytes: they share the records' size
  // as their first guess (one bytes feature: all of it).
  size_t bytes_features() const {
    size_t k = 0;
    for (auto& s : specs_)
      k += s.type == feature_type::bytes;
    return std::max<size_t>(k, 1);
  }

  std::string input_;
  bool keep_input_;
  std::vector<feature_spec> specs_;
  std::vector<found_feature> found_;
  std::vector<ragged> varying_; // var_len values of the item in process()
  tf::Example example_;
};

std::string check_example_parse(const topology::Stage& s) {
  auto& c = s.example_parse();
  std::set<std::string> names;
  for (auto& f : c.feature())
    if (!names.insert(f.name()).second)
      return "feature '" + f.name() + "' is declared twice";
  for (auto& f : c.feature()) {
    if (f.var_len() && names.count(f.name() + "_length") > 0)
      return "feature '" + f.name() + "_length' clashes with the lengths of "
             "var_len feature '" + f.name() + "'";
    if (f.type() != "bytes" && f.type() != "float" && f.type() != "int64")
      return "feature '" + f.name()
             + "': type must be \"bytes\", \"float\" or \"int64\", got \""
             + f.type() + "\"";
    for (auto d : f.shape())
      if (d < 1)
        return "feature '" + f.name() + "': shape dimensions must be >= 1";
    if (f.var_len() && f.type() == "bytes")
      return "feature '" + f.name()
             + "': var_len takes \"float\" or \"int64\" features, not "
               "\"bytes\"";
    if (f.var_len() && f.shape_size() > 0)
      return "feature '" + f.name()
             + "': a var_len feature has no shape (its values are a list of "
               "any length)";
  }
  return {};
}

} // namespace

stage_type example_parse_type() {
  stage_type t;
  t.name = "example_parse";
  t.kind = stage_kind::transform;
  t.one_to_one = true;
  t.description = "parses tf.Example records into typed feature tensors";
  t.config_block = "example_parse";
  t.config_required = {"feature.name", "feature.type"};
  t.check = check_example_parse;
  t.make = [](const stage_info&, const topology::Stage& s) {
    return std::make_shared<example_parse>(example_parse_config_of(s));
  };
  return t;
}

} // namespace af
