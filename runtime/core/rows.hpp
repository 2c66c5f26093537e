// Building batches out of records (rows) of other batches: what the
// batcher (contiguous rows) and shuffle (random rows) do. Handles fixed-size
// dtypes and dtype::bytes alike.
#pragma once

#include <cstdint>
#include <vector>

#include "actorflow/runtime/core/batch.hpp"

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

/// gather_rows for records whose fields differ in length along their first
/// inner dimension (padded_batch): a field [n, w, rest...] becomes
/// [rows, W, rest...], W the largest w among the rows; a field X with a
/// companion "X_length" (i64 [n]) takes W from those lengths instead, and
/// every value of a record past its length (or its item's w) is
/// `padding_value` (converted to the field's dtype). Fields of rank 1 and
/// bytes fields must stack as gather_rows needs. Throws std::runtime_error
/// naming the field on anything else (a length past its item's width, a
/// padding value the dtype cannot hold). `width` >= 0: W is that, and a
/// longer record throws, naming the field.
batch gather_padded(const std::vector<row_ref>& rows, double padding_value,
                    int64_t width = -1);

/// Throws std::runtime_error naming the field if `b`'s fields do not all
/// have the same number of rows.
void check_rows(const batch& b);

} // namespace af
