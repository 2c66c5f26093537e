// filter: keeps the records of each item for which every `where` clause
// holds, on a field with one value per record (shape [n] or [n, 1]; i64,
// i32, u8, f32, f64 or bytes). One item out per item in (possibly with no
// records left, so that sequence numbers stay dense). Config:
// topology.FilterConfig; the grammar is in docs/input-pipeline.md.
//
//   clause := FIELD OP VALUE                 OP: == != < <= > >=
//           | FIELD in {VALUE, ...}          also: FIELD not in {...}
//           | VALUE LT FIELD LT VALUE        LT: < or <= (a range)
//   VALUE  := an integer, a decimal number, or a "quoted string" (bytes)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actorflow/runtime/stage/registry.hpp"

namespace af {

/// One parsed clause.
struct filter_clause {
  enum class kind { compare, in_set, not_in_set, range };
  enum class op { eq, ne, lt, le, gt, ge };
  struct value {
    bool is_string = false;
    bool is_integer = false;
    int64_t integer = 0;
    double number = 0;
    std::string text;
  };
  std::string field;
  kind k = kind::compare;
  op cmp = op::eq;          // compare
  std::vector<value> set;   // in_set, not_in_set
  value lo, hi;             // range (and compare's value in `lo`)
  bool lo_inclusive = false, hi_inclusive = false;
};

/// Parses `text`; "" on success, else what is wrong and at which column.
std::string parse_filter_clause(const std::string& text, filter_clause& out);

stage_type filter_type();

} // namespace af
