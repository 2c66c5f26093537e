// What the trainer and the evaluator share: turning a batch into the model's
// host-side inputs, with the checks that give bad data a clear error.
// Declared in actors/training/host_batch.hpp.
#include "actorflow/actors/training/host_batch.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <unordered_map>

#include "actorflow/gpu/layers.hpp"

namespace af {

namespace {

int64_t per_sample(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape)
    n *= d;
  return n;
}

// Values of an integer tensor as int64, whatever its integer dtype.
int64_t int_at(const tensor& t, int64_t i) {
  switch (t.type()) {
    case dtype::u8:
      return t.data_as<uint8_t>()[i];
    case dtype::i32:
      return t.data_as<int32_t>()[i];
    case dtype::i64:
      return t.data_as<int64_t>()[i];
    default:
      return 0;
  }
}

bool is_int(dtype t) {
  return t == dtype::u8 || t == dtype::i32 || t == dtype::i64;
}

// Each of n samples from [h, w, c] to [c, h, w], in place.
void hwc_to_chw(std::vector<float>& x, int64_t n, int64_t h, int64_t w,
                int64_t c) {
  std::vector<float> tmp(static_cast<size_t>(h * w * c));
  for (int64_t i = 0; i < n; ++i) {
    auto* p = x.data() + i * h * w * c;
    for (int64_t y = 0; y < h; ++y)
      for (int64_t z = 0; z < w; ++z)
        for (int64_t k = 0; k < c; ++k)
          tmp[static_cast<size_t>((k * h + y) * w + z)] = p[(y * w + z) * c + k];
    std::copy(tmp.begin(), tmp.end(), p);
  }
}

// A value of a numeric tensor as float (u8 not scaled).
float float_at(const tensor& t, int64_t i) {
  switch (t.type()) {
    case dtype::f32:
      return t.data_as<float>()[i];
    case dtype::f64:
      return static_cast<float>(t.data_as<double>()[i]);
    default:
      return static_cast<float>(int_at(t, i));
  }
}

// A model with named inputs: out.local holds the n * F local rows of the
// categorical inputs (record-major, in the order of spec.inputs), then the
// n * D floats of the numeric ones, as the features layer takes them.
// Returns n.
int64_t named_to_host(const training_spec& spec, const batch& b,
                      host_batch& out) {
  int64_t n = -1, ids = 0, floats = 0;
  std::vector<const tensor*> xs;
  for (auto& in : spec.inputs) {
    auto& x = b.field(in.field);
    if (n < 0)
      n = x.rows();
    if (x.rows() != n || x.elements() != n * in.width)
      throw input_error("field '" + in.field + "' must hold "
                        + std::to_string(in.width) + " value(s) for each of "
                        + std::to_string(n) + " records, got "
                        + std::to_string(x.elements()) + " values in "
                        + std::to_string(x.rows()) + " rows");
    bool ok = in.categorical() ? is_int(x.type())
                               : is_int(x.type()) || x.type() == dtype::f32
                                   || x.type() == dtype::f64;
    if (!ok)
      throw input_error("field '" + in.field + "' is "
                        + dtype_name(x.type()) + "; "
                        + (in.categorical()
                             ? "a categorical input takes integer ids"
                             : "a numeric input takes f32, f64 or integers"));
    (in.categorical() ? ids : floats) += in.width;
    xs.push_back(&x);
  }
  if (n < 1)
    throw input_error("field '" + spec.inputs.front().field
                      + "' holds no records");
  out.local.resize(static_cast<size_t>(n * (ids + floats)));
  out.ids = static_cast<size_t>(n * ids);
  std::unordered_map<int64_t, int32_t> local;
  local.reserve(static_cast<size_t>(n * ids));
  int64_t id_col = 0, float_col = 0; // this input's first column
  for (size_t k = 0; k < spec.inputs.size(); ++k) {
    auto& in = spec.inputs[k];
    auto& x = *xs[k];
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < in.width; ++j) {
        auto v = r * in.width + j;
        if (!in.categorical()) {
          auto f = float_at(x, v);
          std::memcpy(&out.local[static_cast<size_t>(n * ids + r * floats
                                                     + float_col + j)],
                      &f, sizeof f);
          continue;
        }
        auto id = int_at(x, v);
        if (id < 0 || id >= in.rows)
          throw input_error("field '" + in.field + "' record "
                            + std::to_string(r) + " holds id "
                            + std::to_string(id) + ", outside table '"
                            + in.table + "''s rows [0, "
                            + std::to_string(in.rows) + ")");
        auto [it, added] = local.emplace(
          in.offset + id, static_cast<int32_t>(out.rows.size()));
        if (added)
          out.rows.push_back(in.offset + id);
        out.local[static_cast<size_t>(r * ids + id_col + j)] = it->second;
      }
    (in.categorical() ? id_col : float_col) += in.width;
  }
  return n;
}

// One input field (training.model.input). Returns n.
int64_t dense_to_host(const training_spec& spec, const batch& b,
                      host_batch& out, bool input_in_place) {
  auto field = [&](const std::string& name) -> const tensor& {
    return b.field(name);
  };
  auto& x = field(spec.input);
  auto n = x.rows();
  if (n < 1 || x.shape().empty())
    throw input_error("field '" + spec.input
                                + "' holds no records");
  std::vector<int64_t> sample(x.shape().begin() + 1, x.shape().end());
  auto want = per_sample(spec.model.input_shape);
  if (per_sample(sample) != want)
    throw input_error(
      "field '" + spec.input + "' has "
      + std::to_string(per_sample(sample)) + " values per record (shape "
      + (sample.empty() ? std::string{"scalar"} : gpu::shape_string(sample))
      + "), the model's input_shape " + gpu::shape_string(spec.model.input_shape)
      + " needs " + std::to_string(want));
  out.n = static_cast<int>(n);
  out.epoch = b.epoch;
  auto total = n * want;
  bool embedding = !spec.model.layers.empty()
                   && spec.model.layers.front().type == "embedding";
  // Images come out of image_decode as [height, width, channels]; conv2d
  // takes [channels, height, width]. With one channel both are the same
  // bytes; with more, the samples are transposed.
  auto& want_shape = spec.model.input_shape;
  out.to_chw = !embedding && sample.size() == 3 && want_shape.size() == 3
               && want_shape[0] > 1 && sample[2] == want_shape[0]
               && sample[0] == want_shape[1] && sample[1] == want_shape[2];
  out.height = out.to_chw ? sample[0] : 0;
  out.width = out.to_chw ? sample[1] : 0;
  out.channels = out.to_chw ? sample[2] : 0;
  out.input_in_place = input_in_place && !embedding;
  if (out.input_in_place) {
    if (x.type() != dtype::f32)
      throw std::logic_error("to_host: only an f32 input stays in place");
  } else if (embedding) {
    if (!is_int(x.type()))
      throw input_error("field '" + spec.input
                                  + "' feeds an embedding and must hold "
                                    "integer ids, not "
                                  + dtype_name(x.type()));
    auto rows = spec.model.layers.front().rows;
    std::unordered_map<int64_t, int32_t> local;
    local.reserve(static_cast<size_t>(total));
    out.local.resize(static_cast<size_t>(total));
    out.ids = out.local.size();
    for (int64_t i = 0; i < total; ++i) {
      auto id = int_at(x, i);
      if (id < 0 || id >= rows)
        throw input_error(
          "field '" + spec.input + "' record "
          + std::to_string(i / want) + " holds id " + std::to_string(id)
          + ", outside the embedding table's rows [0, " + std::to_string(rows)
          + ")");
      auto [it, added] =
        local.emplace(id, static_cast<int32_t>(out.rows.size()));
      if (added)
        out.rows.push_back(id);
      out.local[static_cast<size_t>(i)] = it->second;
    }
  } else {
    out.x.resize(static_cast<size_t>(total));
    switch (x.type()) {
      case dtype::f32:
        std::memcpy(out.x.data(), x.data(),
                    static_cast<size_t>(total) * sizeof(float));
        break;
      case dtype::u8: {
        auto* p = x.data_as<uint8_t>();
        for (int64_t i = 0; i < total; ++i)
          out.x[static_cast<size_t>(i)] = static_cast<float>(p[i]) / 255.0f;
        break;
      }
      case dtype::f64: {
        auto* p = x.data_as<double>();
        for (int64_t i = 0; i < total; ++i)
          out.x[static_cast<size_t>(i)] = static_cast<float>(p[i]);
        break;
      }
      default:
        throw input_error("field '" + spec.input
                                    + "' is " + dtype_name(x.type())
                                    + "; the model takes f32, f64 or u8 "
                                      "(scaled to [0, 1])");
    }
    if (out.to_chw)
      hwc_to_chw(out.x, n, sample[0], sample[1], sample[2]);
  }
  return n;
}

void labels_to_host(const training_spec& spec, const batch& b,
                    host_batch& out, int64_t n, const std::string& reference) {
  auto field = [&](const std::string& name) -> const tensor& {
    return b.field(name);
  };
  auto& y = field(spec.label);
  if (y.rows() != n || y.elements() != n || !is_int(y.type()))
    throw input_error(
      "label field '" + spec.label
      + "' must hold one integer per record (" + std::to_string(n)
      + "), got " + dtype_name(y.type()) + " with "
      + std::to_string(y.elements()) + " values");
  out.classes.clear();
  out.binary.clear();
  if (spec.softmax()) {
    auto classes = gpu::output_width(spec.model);
    out.classes.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      auto v = int_at(y, i);
      if (v < 0 || v >= classes)
        throw input_error(
          "label " + std::to_string(v) + " of record "
          + std::to_string(i) + " (epoch " + std::to_string(b.epoch)
          + ") is outside the model's classes [0, " + std::to_string(classes)
          + ")");
      out.classes[static_cast<size_t>(i)] = static_cast<int32_t>(v);
    }
  } else {
    out.binary.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      auto v = int_at(y, i);
      if (v != 0 && v != 1)
        throw input_error(
          "label " + std::to_string(v) + " of record "
          + std::to_string(i)
          + " is not 0 or 1 (sigmoid_binary_cross_entropy)");
      out.binary[static_cast<size_t>(i)] = static_cast<float>(v);
    }
  }
  out.reference.clear();
  if (!reference.empty()) {
    auto& r = field(reference);
    if (r.type() != dtype::f32 || r.elements() != n)
      throw input_error("reference field '" + reference
                                  + "' must hold one f32 per record");
    out.reference.assign(r.data_as<float>(), r.data_as<float>() + n);
  }
}

} // namespace

void to_host(const training_spec& spec, const batch& b, host_batch& out,
             const std::string& reference, bool input_in_place) {
  out.x.clear();
  out.local.clear();
  out.rows.clear();
  out.ids = 0;
  int64_t n = 0;
  if (!spec.inputs.empty()) {
    out.input_in_place = false;
    out.to_chw = false;
    out.height = out.width = out.channels = 0;
    n = named_to_host(spec, b, out);
    out.n = static_cast<int>(n);
    out.epoch = b.epoch;
  } else {
    n = dense_to_host(spec, b, out, input_in_place);
  }
  labels_to_host(spec, b, out, n, reference);
}

} // namespace af
