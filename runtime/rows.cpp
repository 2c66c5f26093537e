#include "runtime/rows.hpp"

#include <cstring>
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

} // namespace

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
    for (size_t i = 0; i < item.fields.size(); ++i)
      if (item.fields[i].name != layout.fields[i].name
          || !same_layout(item.fields[i].value, layout.fields[i].value))
        throw std::runtime_error(
          "field '" + item.fields[i].name + "' ("
          + to_string(item.fields[i].value)
          + ") does not stack with '" + layout.fields[i].name + "' ("
          + to_string(layout.fields[i].value) + ")");
  }
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
