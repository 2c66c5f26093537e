// Writing your own stage type (docs/embedding.md). Declared in
// runtime/stage/custom_stage.hpp.
#include "actorflow/runtime/stage/custom_stage.hpp"

#include <charconv>
#include <cmath>
#include <stdexcept>
#include <type_traits>

namespace af {

namespace {

[[noreturn]] void bad_value(const std::string& key, const std::string& value,
                            const char* what) {
  throw std::invalid_argument("option '" + key + "': '" + value + "' is not "
                              + what);
}

// The whole of option `key` as a T (from_chars: no locale, no leading
// blanks); floating point values must be finite.
template <class T>
T number(const stage_options& o, const std::string& key, T fallback,
         const char* what) {
  if (!o.has(key))
    return fallback;
  auto text = o.get(key);
  T value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(),
                                   value);
  bool ok = ec == std::errc{} && end == text.data() + text.size()
            && !text.empty();
  if constexpr (std::is_floating_point_v<T>)
    ok = ok && std::isfinite(value);
  if (!ok)
    bad_value(key, text, what);
  return value;
}

class map_logic : public stage_logic {
public:
  explicit map_logic(map_fn fn) : fn_{std::move(fn)} {}

  void process(batch&& item, emitter& out) override {
    auto seq = item.seq;
    auto epoch = item.epoch;
    auto result = fn_(std::move(item));
    result.seq = seq;
    result.epoch = epoch;
    out.push(std::move(result));
  }

private:
  map_fn fn_;
};

} // namespace

bool stage_options::has(const std::string& key) const {
  return stage_->options().count(key) > 0;
}

std::string stage_options::get(const std::string& key,
                               std::string fallback) const {
  auto it = stage_->options().find(key);
  return it == stage_->options().end() ? std::move(fallback) : it->second;
}

std::string stage_options::require(const std::string& key) const {
  auto it = stage_->options().find(key);
  if (it == stage_->options().end())
    throw std::invalid_argument("option '" + key
                                + "' is required (options { key: \"" + key
                                + "\" value: \"...\" })");
  return it->second;
}

int64_t stage_options::get_int(const std::string& key,
                               int64_t fallback) const {
  return number(*this, key, fallback, "a whole number");
}

double stage_options::get_double(const std::string& key,
                                 double fallback) const {
  return number(*this, key, fallback, "a finite number");
}

bool stage_options::get_bool(const std::string& key, bool fallback) const {
  if (!has(key))
    return fallback;
  auto text = get(key);
  if (text == "true" || text == "1")
    return true;
  if (text == "false" || text == "0")
    return false;
  bad_value(key, text, "true or false");
}

void stage_options::only(const std::vector<std::string>& known) const {
  for (auto& [key, value] : stage_->options()) {
    bool found = false;
    for (auto& k : known)
      found = found || k == key;
    if (found)
      continue;
    std::string list;
    for (auto& k : known) {
      if (!list.empty())
        list += ", ";
      list += k;
    }
    throw std::invalid_argument(
      "unknown option '" + key + "' (this stage type reads: "
      + (list.empty() ? std::string{"none"} : list) + ")");
  }
}

stage_type map_stage(std::string name, std::string description,
                     std::vector<std::string> known_options, map_factory make,
                     bool blocking) {
  if (!make)
    throw std::invalid_argument("map_stage '" + name + "': no factory");
  stage_type t;
  t.name = std::move(name);
  t.kind = stage_kind::transform;
  t.description = std::move(description);
  t.blocking = blocking;
  t.one_to_one = true;
  t.check = [known = std::move(known_options),
             make](const topology::Stage& s) -> std::string {
    try {
      stage_options opts{s};
      opts.only(known);
      stage_info info;
      info.name = s.name();
      info.type = s.type();
      if (!make(info, opts))
        return "the stage's factory returned no function";
    } catch (const std::exception& ex) {
      return ex.what();
    }
    return {};
  };
  t.make = [make](const stage_info& info, const topology::Stage& s) {
    auto fn = make(info, stage_options{s});
    if (!fn)
      throw std::runtime_error("the stage's factory returned no function");
    return std::shared_ptr<stage_logic>{std::make_shared<map_logic>(
      std::move(fn))};
  };
  return t;
}

} // namespace af
