// filter: keeps the records of each item for which every `where` clause
// holds, on a field with one value per record (shape [n] or [n, 1]; i64,
// i32, u8, f32, f64 or bytes). Declared in actors/dataset/filter.hpp.
#include "actorflow/actors/dataset/filter.hpp"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "actorflow/runtime/core/rows.hpp"
#include "actorflow/runtime/topology/topology.hpp"

namespace af {

namespace {

// A tokenizer over a clause: names, numbers, quoted strings, operators,
// braces and commas; `at` is the column (1-based) of the token.
struct lexer {
  const std::string& s;
  size_t i = 0;
  size_t mark = 1; // column where the last value() began

  void blanks() {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i])))
      ++i;
  }
  bool done() {
    blanks();
    return i == s.size();
  }
  size_t column() {
    blanks();
    return i + 1;
  }
  bool take(const std::string& t) {
    blanks();
    if (s.compare(i, t.size(), t) != 0)
      return false;
    // A word must end there ("in" is not the start of "index").
    if (std::isalpha(static_cast<unsigned char>(t.back())) && i + t.size() < s.size()
        && (std::isalnum(static_cast<unsigned char>(s[i + t.size()]))
            || s[i + t.size()] == '_'))
      return false;
    i += t.size();
    return true;
  }
  bool name(std::string& out) {
    blanks();
    size_t j = i;
    while (j < s.size()
           && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_'
               || s[j] == '/' || s[j] == '.' || s[j] == '-'))
      ++j;
    if (j == i || std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '-'
        || s[i] == '.')
      return false;
    out = s.substr(i, j - i);
    i = j;
    return true;
  }
  // A number or a quoted string; "" or what is wrong.
  std::string value(filter_clause::value& v) {
    blanks();
    mark = i + 1;
    if (i < s.size() && s[i] == '"') {
      std::string text;
      for (++i; i < s.size() && s[i] != '"'; ++i) {
        if (s[i] == '\\' && i + 1 < s.size())
          ++i;
        text += s[i];
      }
      if (i == s.size())
        return "a string without its closing quote";
      ++i;
      v.is_string = true;
      v.text = std::move(text);
      return {};
    }
    const char* begin = s.c_str() + i;
    char* end = nullptr;
    errno = 0;
    auto n = std::strtod(begin, &end);
    std::string token(begin, static_cast<size_t>(end - begin));
    // Decimal numbers only: no nan, inf or hex (strtod takes them all);
    // ERANGE only for overflow (a tiny number underflows to 0, fine).
    if (end == begin
        || token.find_first_not_of("0123456789+-.eE") != std::string::npos
        || !std::isfinite(n))
      return "expected a number or a \"quoted string\"";
    v.number = n;
    if (token.find_first_of(".eE") == std::string::npos) {
      char* iend = nullptr;
      errno = 0;
      auto k = std::strtoll(begin, &iend, 10);
      if (iend == end && errno == 0) {
        v.is_integer = true;
        v.integer = k;
      }
    }
    i += token.size();
    return {};
  }
};

bool take_op(lexer& lx, filter_clause::op& op) {
  using o = filter_clause::op;
  for (auto [text, value] :
       {std::pair{"==", o::eq}, std::pair{"!=", o::ne}, std::pair{"<=", o::le},
        std::pair{">=", o::ge}, std::pair{"<", o::lt}, std::pair{">", o::gt}})
    if (lx.take(text)) {
      op = value;
      return true;
    }
  return false;
}

} // namespace

std::string parse_filter_clause(const std::string& text, filter_clause& c) {
  lexer lx{text};
  auto at = [&](const std::string& what) {
    return "column " + std::to_string(lx.column()) + ": " + what;
  };
  auto at_value = [&](const std::string& what) {
    return "column " + std::to_string(lx.mark) + ": " + what;
  };
  c = filter_clause{};
  if (lx.done())
    return "an empty clause";
  if (lx.name(c.field)) {
    if (lx.take("not")) {
      if (!lx.take("in"))
        return at("expected 'in' after 'not'");
      c.k = filter_clause::kind::not_in_set;
    } else if (lx.take("in")) {
      c.k = filter_clause::kind::in_set;
    } else if (take_op(lx, c.cmp)) {
      c.k = filter_clause::kind::compare;
      auto why = lx.value(c.lo);
      if (!why.empty())
        return at_value(why);
      return lx.done() ? "" : at("unexpected text after the clause");
    } else {
      return at("expected ==, !=, <, <=, >, >=, in or not in");
    }
    if (!lx.take("{"))
      return at("expected '{' to start the set");
    do {
      filter_clause::value v;
      auto why = lx.value(v);
      if (!why.empty())
        return at_value(why);
      c.set.push_back(std::move(v));
    } while (lx.take(","));
    if (!lx.take("}"))
      return at("expected ',' or '}'");
    return lx.done() ? "" : at("unexpected text after the clause");
  }
  // A range: VALUE < FIELD < VALUE.
  c.k = filter_clause::kind::range;
  auto why = lx.value(c.lo);
  if (!why.empty())
    return at_value("expected a field name or a range such as 0 <= x < 10 ("
                    + why + ")");
  filter_clause::op op;
  auto col = lx.column();
  auto at_col = [&](const std::string& what) {
    return "column " + std::to_string(col) + ": " + what;
  };
  if (!take_op(lx, op) || (op != filter_clause::op::lt
                           && op != filter_clause::op::le))
    return at_col("a range needs < or <= after its lower bound");
  c.lo_inclusive = op == filter_clause::op::le;
  if (!lx.name(c.field))
    return at("expected a field name");
  col = lx.column();
  if (!take_op(lx, op) || (op != filter_clause::op::lt
                           && op != filter_clause::op::le))
    return at_col("a range needs < or <= before its upper bound");
  c.hi_inclusive = op == filter_clause::op::le;
  why = lx.value(c.hi);
  if (!why.empty())
    return at_value(why);
  if (c.lo.is_string || c.hi.is_string)
    return "a range needs numbers, not strings";
  return lx.done() ? "" : at("unexpected text after the clause");
}

namespace {

// One record's value of a field, as a number or as bytes.
struct cell {
  bool is_string = false;
  bool is_integer = false;
  int64_t integer = 0;
  double number = 0;
  std::string_view text;
};

// -1, 0, 1: `a` against the literal `v`, both numbers; `unordered` for a
// NaN value, which only != and not in keep.
constexpr int unordered = 2;
int order(const cell& a, const filter_clause::value& v) {
  if (a.is_integer && v.is_integer)
    return a.integer < v.integer ? -1 : a.integer > v.integer ? 1 : 0;
  double x = a.is_integer ? static_cast<double>(a.integer) : a.number;
  if (std::isnan(x))
    return unordered;
  return x < v.number ? -1 : x > v.number ? 1 : 0;
}

bool equal(const cell& a, const filter_clause::value& v) {
  return a.is_string ? a.text == v.text : order(a, v) == 0;
}

bool holds(const filter_clause& c, const cell& a) {
  using k = filter_clause::kind;
  using o = filter_clause::op;
  switch (c.k) {
    case k::in_set:
    case k::not_in_set: {
      bool found = false;
      for (auto& v : c.set)
        found = found || equal(a, v);
      return found == (c.k == k::in_set);
    }
    case k::range: {
      int lo = order(a, c.lo), hi = order(a, c.hi);
      if (lo == unordered)
        return false;
      return (lo > 0 || (lo == 0 && c.lo_inclusive))
             && (hi < 0 || (hi == 0 && c.hi_inclusive));
    }
    case k::compare:
      break;
  }
  if (a.is_string) {
    bool eq = a.text == c.lo.text;
    return c.cmp == o::eq ? eq : !eq;
  }
  int r = order(a, c.lo);
  if (r == unordered)
    return c.cmp == o::ne;
  switch (c.cmp) {
    case o::eq: return r == 0;
    case o::ne: return r != 0;
    case o::lt: return r < 0;
    case o::le: return r <= 0;
    case o::gt: return r > 0;
    case o::ge: return r >= 0;
  }
  return false;
}

std::vector<std::string> clause_texts(const topology::Stage& s) {
  return {s.filter().where().begin(), s.filter().where().end()};
}

class filter : public stage_logic {
public:
  filter(const stage_info& info, const topology::Stage& s)
    : label_(info.label()) {
    for (auto& text : clause_texts(s)) {
      filter_clause c;
      auto why = parse_filter_clause(text, c);
      if (!why.empty())
        throw std::invalid_argument("filter.where \"" + text + "\": " + why);
      clauses_.push_back(std::move(c));
    }
  }

  void process(batch&& item, emitter& out) override {
    check_rows(item); // every field with the same number of records
    auto n = item.records();
    std::vector<uint8_t> keep(static_cast<size_t>(n), 1);
    for (auto& c : clauses_) {
      auto* t = item.find(c.field);
      if (t == nullptr)
        throw std::runtime_error("filter: the items have no field '" + c.field
                                 + "'");
      check_field(c, *t);
      for (int64_t i = 0; i < n; ++i)
        if (keep[static_cast<size_t>(i)] && !holds(c, cell_of(*t, i)))
          keep[static_cast<size_t>(i)] = 0;
    }
    std::vector<row_ref> rows;
    for (int64_t i = 0; i < n; ++i)
      if (keep[static_cast<size_t>(i)])
        rows.push_back(row_ref{&item, i});
    if (static_cast<int64_t>(rows.size()) == n) {
      out.push(std::move(item));
      return;
    }
    batch result = rows.empty() ? no_rows(item) : gather_rows(rows);
    result.seq = item.seq;
    result.epoch = item.epoch;
    out.push(std::move(result));
  }

private:
  // A field the clause can read: one value per record, of a kind that
  // matches the clause's values.
  static void check_field(const filter_clause& c, const tensor& t) {
    auto per_record = t.rows() > 0 ? t.elements() / t.rows() : 1;
    if (t.shape().empty() || per_record != 1)
      throw std::runtime_error("filter: field '" + c.field + "' is "
                               + to_string(t)
                               + "; a clause needs one value per record");
    bool strings = t.type() == dtype::bytes;
    auto check = [&](const filter_clause::value& v) {
      if (v.is_string != strings)
        throw std::runtime_error(
          "filter: field '" + c.field + "' holds "
          + (strings ? "bytes; compare it with \"quoted strings\""
                     : std::string{dtype_name(t.type())}
                         + " numbers; compare it with numbers"));
    };
    if (!strings && t.type() != dtype::i64 && t.type() != dtype::i32
        && t.type() != dtype::u8 && t.type() != dtype::f32
        && t.type() != dtype::f64)
      throw std::runtime_error("filter: field '" + c.field + "' is "
                               + dtype_name(t.type())
                               + ", which a clause cannot compare");
    if (strings && c.k == filter_clause::kind::compare
        && c.cmp != filter_clause::op::eq && c.cmp != filter_clause::op::ne)
      throw std::runtime_error("filter: field '" + c.field
                               + "' holds bytes: only == and != compare "
                                 "them");
    if (c.k == filter_clause::kind::in_set
        || c.k == filter_clause::kind::not_in_set)
      for (auto& v : c.set)
        check(v);
    else
      check(c.lo);
  }

  static cell cell_of(const tensor& t, int64_t i) {
    cell c;
    switch (t.type()) {
      case dtype::bytes:
        c.is_string = true;
        c.text = t.string_at(i);
        break;
      case dtype::i64:
        c.is_integer = true;
        c.integer = t.data_as<int64_t>()[i];
        break;
      case dtype::i32:
        c.is_integer = true;
        c.integer = t.data_as<int32_t>()[i];
        break;
      case dtype::u8:
        c.is_integer = true;
        c.integer = t.data_as<uint8_t>()[i];
        break;
      case dtype::f32:
        c.number = t.data_as<float>()[i];
        break;
      default:
        c.number = t.data_as<double>()[i];
        break;
    }
    return c;
  }

  // `item`'s fields with no records (its shapes, first dimension 0).
  static batch no_rows(const batch& item) {
    batch out;
    for (auto& f : item.fields) {
      auto shape = f.value.shape();
      if (shape.empty())
        continue;
      shape[0] = 0;
      if (f.value.type() == dtype::bytes)
        out.set(f.name, tensor{dtype::bytes, shape,
                               tensor::strings({}).storage()});
      else
        out.set(f.name, tensor::allocate(f.value.type(), shape));
    }
    return out;
  }

  std::string label_;
  std::vector<filter_clause> clauses_;
};

std::string check_filter(const topology::Stage& s) {
  for (auto& text : clause_texts(s)) {
    filter_clause c;
    auto why = parse_filter_clause(text, c);
    if (!why.empty())
      return "filter.where \"" + text + "\": " + why;
  }
  return {};
}

} // namespace

stage_type filter_type() {
  stage_type t;
  t.name = "filter";
  t.kind = stage_kind::transform;
  t.one_to_one = true;
  t.description = "keeps the records for which every where clause holds";
  t.config_block = "filter";
  t.config_required = {"where"};
  t.check = check_filter;
  t.make = [](const stage_info& info, const topology::Stage& s) {
    return std::make_shared<filter>(info, s);
  };
  return t;
}

} // namespace af
