// unbatch: splits each record along its first inner dimension, as tf.data's
// unbatch() splits elements: fields of shape [n, m, ...] become [n * m, ...]
// (the same bytes, not copied). Declared in actors/dataset/unbatch.hpp.
#include "actorflow/actors/dataset/unbatch.hpp"

#include <cstring>
#include <stdexcept>

#include "actorflow/runtime/core/rows.hpp"
#include "actorflow/runtime/topology/topology.hpp"

namespace af {

namespace {

// `t` ([n]) with each value repeated m times.
tensor repeated(const tensor& t, int64_t m) {
  auto n = t.rows();
  if (t.type() == dtype::bytes) {
    size_t total = 0;
    for (int64_t i = 0; i < n; ++i)
      total += t.string_at(i).size() * static_cast<size_t>(m);
    bytes_builder b{total, static_cast<size_t>(n * m)};
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j)
        b.add(t.string_at(i));
    return b.finish();
  }
  auto size = dtype_size(t.type());
  auto out = tensor::allocate(t.type(), {n * m});
  auto* dst = out.mutable_data();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j, dst += size)
      std::memcpy(dst, t.data() + static_cast<size_t>(i) * size, size);
  return out;
}

// `t` ([n, m, rest...]) as [n * m, rest...]: its bytes as they are.
tensor flattened(const tensor& t) {
  auto shape = t.shape();
  shape[1] *= shape[0];
  shape.erase(shape.begin());
  if (t.type() != dtype::bytes && t.byte_size() != t.storage()->size()) {
    // A view into a larger buffer: a copy of its part.
    auto out = tensor::allocate(t.type(), shape);
    std::memcpy(out.mutable_data(), t.data(), t.byte_size());
    return out;
  }
  return tensor{t.type(), shape, t.storage()};
}

class unbatch : public stage_logic {
public:
  void process(batch&& item, emitter& out) override {
    check_rows(item); // every field with the same number of records
    int64_t m = -1;
    std::string first;
    for (auto& f : item.fields) {
      auto& s = f.value.shape();
      if (s.size() < 2)
        continue;
      if (m < 0) {
        m = s[1];
        first = f.name;
      } else if (s[1] != m) {
        throw std::runtime_error(
          "unbatch: field '" + f.name + "' has " + std::to_string(s[1])
          + " values per record along its first inner dimension, field '"
          + first + "' " + std::to_string(m) + "; every field of rank 2 or "
          "more must split alike");
      }
    }
    if (m < 0)
      throw std::runtime_error("unbatch: no field has an inner dimension to "
                               "split (every field is one value per record)");
    batch result;
    result.seq = item.seq;
    result.epoch = item.epoch;
    for (auto& f : item.fields) {
      if (f.value.shape().empty())
        throw std::runtime_error("unbatch: field '" + f.name
                                 + "' is a scalar, not one value per record");
      result.set(f.name, f.value.shape().size() >= 2 ? flattened(f.value)
                                                     : repeated(f.value, m));
    }
    out.push(std::move(result));
  }
};

} // namespace

stage_type unbatch_type() {
  stage_type t;
  t.name = "unbatch";
  t.kind = stage_kind::transform;
  t.one_to_one = true;
  t.description = "splits each record along its first inner dimension";
  t.config_block = "unbatch";
  t.make = [](const stage_info&, const topology::Stage&) {
    return std::make_shared<unbatch>();
  };
  return t;
}

} // namespace af
