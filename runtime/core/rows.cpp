// Building batches out of records (rows) of other batches: what the batcher
// (contiguous rows) and shuffle (random rows) do. Declared in
// runtime/core/rows.hpp.
#include "actorflow/runtime/core/rows.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace af {

namespace {

bool same_layout(const tensor& a, const tensor& b) {
  return a.type() == b.type() && a.shape().size() == b.shape().size()
         && !a.shape().empty()
         && std::equal(a.shape().begin() + 1, a.shape().end(),
                       b.shape().begin() + 1);
}

// Bytes per row of a fixed-size tensor.
size_t row_bytes(const tensor& t) {
  return t.rows() == 0 ? 0 : t.byte_size() / static_cast<size_t>(t.rows());
}

tensor gather_fixed(const std::vector<row_ref>& rows, size_t field) {
  auto& first = rows.front().item->fields[field].value;
  auto shape = first.shape();
  shape[0] = static_cast<int64_t>(rows.size());
  auto out = tensor::allocate(first.type(), shape);
  auto width = row_bytes(first);
  auto* dst = out.mutable_data();
  size_t i = 0;
  while (i < rows.size()) {
    // Extend a run of consecutive rows of the same item.
    size_t j = i + 1;
    while (j < rows.size() && rows[j].item == rows[i].item
           && rows[j].row == rows[j - 1].row + 1)
      ++j;
    auto& src = rows[i].item->fields[field].value;
    std::memcpy(dst + i * width,
                src.data() + static_cast<size_t>(rows[i].row) * width,
                (j - i) * width);
    i = j;
  }
  return out;
}

tensor gather_strings(const std::vector<row_ref>& rows, size_t field) {
  auto& first = rows.front().item->fields[field].value;
  // Elements per row (a row may hold several strings: shape [n, k]).
  int64_t per_row = 1;
  for (size_t d = 1; d < first.shape().size(); ++d)
    per_row *= first.shape()[d];
  size_t total = 0;
  for (auto& r : rows) {
    auto& t = r.item->fields[field].value;
    for (int64_t k = 0; k < per_row; ++k)
      total += t.string_at(r.row * per_row + k).size();
  }
  bytes_builder b{total, rows.size() * static_cast<size_t>(per_row)};
  for (auto& r : rows) {
    auto& t = r.item->fields[field].value;
    for (int64_t k = 0; k < per_row; ++k)
      b.add(t.string_at(r.row * per_row + k));
  }
  auto flat = b.finish();
  auto shape = first.shape();
  shape[0] = static_cast<int64_t>(rows.size());
  return tensor{dtype::bytes, shape, flat.storage()};
}

// Fields of every row's item: the same names in the same order, dtypes
// alike, and shapes that stack (`padded`: except their first inner
// dimension, for fixed-size fields of rank >= 2).
void check_fields(const std::vector<row_ref>& rows, bool padded) {
  auto& layout = *rows.front().item;
  for (auto& r : rows) {
    auto& item = *r.item;
    if (&item == &layout)
      continue;
    if (item.fields.size() != layout.fields.size())
      throw std::runtime_error("items with different fields cannot be "
                               "combined ("
                               + std::to_string(item.fields.size()) + " vs "
                               + std::to_string(layout.fields.size()) + ")");
    for (size_t i = 0; i < item.fields.size(); ++i) {
      auto& a = item.fields[i].value;
      auto& b = layout.fields[i].value;
      bool stacks = same_layout(a, b);
      if (!stacks && padded && a.type() == b.type() && a.type() != dtype::bytes
          && a.shape().size() >= 2 && a.shape().size() == b.shape().size())
        stacks = std::equal(a.shape().begin() + 2, a.shape().end(),
                            b.shape().begin() + 2);
      if (item.fields[i].name != layout.fields[i].name || !stacks)
        throw std::runtime_error(
          "field '" + item.fields[i].name + "' (" + to_string(a)
          + ") does not stack with '" + layout.fields[i].name + "' ("
          + to_string(b) + ")");
    }
  }
}

// One element of dtype `t` holding `v`, as bytes.
std::vector<std::byte> element_of(dtype t, double v, const std::string& field) {
  std::vector<std::byte> out(dtype_size(t));
  auto refuse = [&] {
    return std::runtime_error("padding_value " + std::to_string(v)
                              + " does not fit field '" + field + "' ("
                              + dtype_name(t) + ")");
  };
  auto whole = [&](double lo, double hi) {
    if (!(v >= lo && v <= hi) || v != std::floor(v))
      throw refuse();
  };
  auto put = [&](auto x) { std::memcpy(out.data(), &x, sizeof x); };
  switch (t) {
    case dtype::u8:
      whole(0, 255);
      put(static_cast<uint8_t>(v));
      break;
    case dtype::i32:
      whole(-2147483648.0, 2147483647.0);
      put(static_cast<int32_t>(v));
      break;
    case dtype::i64:
      whole(-9223372036854775808.0, 9223372036854774784.0);
      put(static_cast<int64_t>(v));
      break;
    case dtype::f32:
      if (std::fabs(v) > static_cast<double>(std::numeric_limits<float>::max()))
        throw refuse();
      put(static_cast<float>(v));
      break;
    case dtype::f64:
      put(v);
      break;
    default: // f16, bf16: only zero, whose bits are all zero
      if (v != 0)
        throw refuse();
  }
  return out;
}

// Field `field` ([n, w, rest...] in each item) as [rows, W, rest...]; see
// gather_padded. `lengths`: the index of its "X_length" field, or -1.
tensor gather_field_padded(const std::vector<row_ref>& rows, size_t field,
                           int lengths, double padding_value, int64_t fixed) {
  auto& first = rows.front().item->fields[field];
  auto type = first.value.type();
  auto pad = element_of(type, padding_value, first.name);
  size_t rest = 1; // elements per step along the padded dimension
  for (size_t d = 2; d < first.value.shape().size(); ++d)
    rest *= static_cast<size_t>(first.value.shape()[d]);
  auto unit = rest * dtype_size(type);
  std::vector<int64_t> len(rows.size());
  int64_t width = 0;
  for (size_t k = 0; k < rows.size(); ++k) {
    auto& item = *rows[k].item;
    int64_t w = item.fields[field].value.shape()[1];
    int64_t l = w;
    if (lengths >= 0) {
      auto& lt = item.fields[static_cast<size_t>(lengths)].value;
      l = lt.data_as<int64_t>()[rows[k].row];
      if (l < 0 || l > w)
        throw std::runtime_error(
          "field '" + item.fields[static_cast<size_t>(lengths)].name
          + "' gives a record " + std::to_string(l) + " values, but field '"
          + first.name + "' holds " + std::to_string(w) + " per record");
    }
    if (fixed >= 0 && l > fixed)
      throw std::runtime_error("field '" + first.name + "': a record holds "
                               + std::to_string(l) + " values, more than the "
                               "width " + std::to_string(fixed));
    len[k] = l;
    width = std::max(width, l);
  }
  if (fixed >= 0)
    width = fixed;
  auto shape = first.value.shape();
  shape[0] = static_cast<int64_t>(rows.size());
  shape[1] = width;
  auto out = tensor::allocate(type, shape);
  if (width == 0 || unit == 0)
    return out; // no values at all
  auto* dst = out.mutable_data();
  bool zero = std::all_of(pad.begin(), pad.end(),
                          [](std::byte b) { return b == std::byte{0}; });
  for (size_t k = 0; k < rows.size(); ++k) {
    auto& t = rows[k].item->fields[field].value;
    auto w = static_cast<size_t>(t.shape()[1]);
    auto l = static_cast<size_t>(len[k]);
    auto* row = dst + k * static_cast<size_t>(width) * unit;
    if (l > 0)
      std::memcpy(row, t.data() + static_cast<size_t>(rows[k].row) * w * unit,
                  l * unit);
    auto* tail = row + l * unit;
    auto tail_bytes = (static_cast<size_t>(width) - l) * unit;
    if (zero)
      std::memset(tail, 0, tail_bytes);
    else
      for (size_t at = 0; at < tail_bytes; at += pad.size())
        std::memcpy(tail + at, pad.data(), pad.size());
  }
  return out;
}

} // namespace

batch gather_padded(const std::vector<row_ref>& rows, double padding_value,
                    int64_t width) {
  batch out;
  if (rows.empty())
    return out;
  check_fields(rows, true);
  auto& layout = *rows.front().item;
  for (size_t i = 0; i < layout.fields.size(); ++i) {
    auto& f = layout.fields[i];
    if (f.value.shape().empty())
      throw std::runtime_error("field '" + f.name + "' is a scalar, not rows");
    if (f.value.type() == dtype::bytes)
      out.fields.push_back(named_tensor{f.name, gather_strings(rows, i)});
    else if (f.value.shape().size() < 2)
      out.fields.push_back(named_tensor{f.name, gather_fixed(rows, i)});
    else {
      int lengths = -1;
      for (size_t j = 0; j < layout.fields.size(); ++j) {
        auto& c = layout.fields[j];
        if (c.name == f.name + "_length" && c.value.type() == dtype::i64
            && c.value.shape().size() == 1)
          lengths = static_cast<int>(j);
      }
      out.fields.push_back(named_tensor{
        f.name, gather_field_padded(rows, i, lengths, padding_value, width)});
    }
  }
  return out;
}

void check_rows(const batch& b) {
  for (auto& f : b.fields)
    if (f.value.shape().empty() || f.value.rows() != b.records())
      throw std::runtime_error("field '" + f.name + "' (" + to_string(f.value)
                               + ") does not have the batch's "
                               + std::to_string(b.records()) + " rows");
}

batch gather_rows(const std::vector<row_ref>& rows) {
  batch out;
  if (rows.empty())
    return out;
  check_fields(rows, false);
  auto& layout = *rows.front().item;
  for (size_t i = 0; i < layout.fields.size(); ++i) {
    auto& name = layout.fields[i].name;
    if (layout.fields[i].value.shape().empty())
      throw std::runtime_error("field '" + name + "' is a scalar, not rows");
    out.fields.push_back(named_tensor{
      name, layout.fields[i].value.type() == dtype::bytes
              ? gather_strings(rows, i)
              : gather_fixed(rows, i)});
  }
  return out;
}

} // namespace af
