#include "actors/example_parse.hpp"

#include <cstring>
#include <stdexcept>

#include "proto/example.pb.h"

namespace af {

namespace {

enum class feature_type { bytes, floats, int64s };

struct feature_spec {
  std::string name;
  feature_type type;
  std::vector<int64_t> shape;
  int64_t values = 1;  // per record
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

class example_parse : public stage_logic {
public:
  explicit example_parse(const topology::ExampleParseConfig& cfg)
    : input_(cfg.input().empty() ? "record" : cfg.input()),
      keep_input_(cfg.keep_input()) {
    for (auto& f : cfg.feature()) {
      feature_spec spec;
      spec.name = f.name();
      spec.type = f.type() == "bytes"   ? feature_type::bytes
                  : f.type() == "float" ? feature_type::floats
                                        : feature_type::int64s;
      spec.shape.assign(f.shape().begin(), f.shape().end());
      for (auto d : spec.shape)
        spec.values *= d;
      specs_.push_back(std::move(spec));
    }
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
    std::vector<bytes_builder> strings(specs_.size());
    for (size_t k = 0; k < specs_.size(); ++k) {
      auto& spec = specs_[k];
      auto shape = spec.shape;
      shape.insert(shape.begin(), n);
      if (spec.type == feature_type::floats)
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
      example_.Clear();
      if (!example_.ParseFromArray(rec.data(), static_cast<int>(rec.size())))
        throw std::runtime_error(where() + ": not a tf.Example record");
      auto& map = example_.features().feature();
      for (size_t k = 0; k < specs_.size(); ++k) {
        auto& spec = specs_[k];
        auto it = map.find(spec.name);
        if (it == map.end())
          throw std::runtime_error(where() + ": feature '" + spec.name
                                   + "' is missing");
        auto& f = it->second;
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
      if (spec.type == feature_type::bytes) {
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
  std::string input_;
  bool keep_input_;
  std::vector<feature_spec> specs_;
  tf::Example example_;
};

std::string check(const topology::Stage& s) {
  if (s.config_case() != topology::Stage::kExampleParse)
    return "needs an example_parse { feature { ... } } block";
  auto& c = s.example_parse();
  if (c.feature().empty())
    return "example_parse needs at least one feature";
  for (auto& f : c.feature()) {
    if (f.name().empty())
      return "a feature has no name";
    if (f.type() != "bytes" && f.type() != "float" && f.type() != "int64")
      return "feature '" + f.name()
             + "': type must be \"bytes\", \"float\" or \"int64\", got \""
             + f.type() + "\"";
    for (auto d : f.shape())
      if (d < 1)
        return "feature '" + f.name() + "': shape dimensions must be >= 1";
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
  t.check = check;
  t.make = [](const stage_info&, const topology::Stage& s) {
    return std::make_shared<example_parse>(s.example_parse());
  };
  return t;
}

} // namespace af
