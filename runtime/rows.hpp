// Building batches out of records (rows) of other batches: what the
// batcher (contiguous rows) and shuffle (random rows) do. Handles fixed-size
// dtypes and dtype::bytes alike.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/batch.hpp"

namespace af {

/// Row `row` of `item`.
struct row_ref {
  const batch* item;
  int64_t row;
};

/// A batch holding `rows` in order: for every field of the first row's
/// item, one contiguous tensor. Runs of consecutive rows of one item are
/// copied with one memcpy. seq and epoch are left 0. Throws
/// std::runtime_error naming the field when the items' fields differ in
/// name, dtype or per-row shape.
batch gather_rows(const std::vector<row_ref>& rows);

/// Throws std::runtime_error naming the field if `b`'s fields do not all
/// have the same number of rows.
void check_rows(const batch& b);

} // namespace af
