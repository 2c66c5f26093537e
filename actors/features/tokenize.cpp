// tokenize: splits each record's text into words and maps them to ids
// through a vocabulary file (one word per line, id = 0-based line number).
// Declared in actors/features/tokenize.hpp.
#include "actorflow/actors/features/tokenize.hpp"

#include <algorithm>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "actorflow/runtime/topology/topology.hpp"

namespace af {

namespace {

struct tokenize_config {
  std::string input = "text";
  std::string output = "tokens";
  std::string vocabulary; // required
  bool lowercase = true;
  int64_t oov_id = -1;    // -1: unknown words are dropped
  int64_t max_tokens = 0; // 0: no limit
};

tokenize_config tokenize_config_of(const topology::Stage& s) {
  auto& p = s.tokenize();
  tokenize_config c;
  if (!p.input().empty())
    c.input = p.input();
  if (!p.output().empty())
    c.output = p.output();
  c.vocabulary = p.vocabulary();
  if (p.has_lowercase())
    c.lowercase = p.lowercase();
  if (p.has_oov_id())
    c.oov_id = p.oov_id();
  c.max_tokens = p.max_tokens();
  return c;
}

using vocabulary = std::unordered_map<std::string, int64_t>;

// The words of `path`, one per line, by 0-based line number. Throws
// std::runtime_error naming the file and line of a problem.
vocabulary read_vocabulary(const std::string& path) {
  std::ifstream in{path};
  if (!in)
    throw std::runtime_error(path + ": cannot open the vocabulary");
  vocabulary v;
  std::string word;
  int64_t line = 0;
  while (std::getline(in, word)) {
    if (!word.empty() && word.back() == '\r')
      word.pop_back();
    ++line;
    if (word.empty())
      throw std::runtime_error(path + ":" + std::to_string(line)
                               + ": an empty line (one word per line)");
    if (!v.emplace(word, line - 1).second)
      throw std::runtime_error(path + ":" + std::to_string(line) + ": '"
                               + word + "' is already on line "
                               + std::to_string(v[word] + 1));
  }
  if (v.empty())
    throw std::runtime_error(path + ": the vocabulary has no words");
  return v;
}

bool word_byte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
         || (c >= '0' && c <= '9') || c == '\'' || c >= 0x80;
}

class tokenize : public stage_logic {
public:
  explicit tokenize(tokenize_config cfg)
    : cfg_(std::move(cfg)), vocab_(read_vocabulary(cfg_.vocabulary)) {}

  void process(batch&& item, emitter& out) override {
    auto& texts = item.at(cfg_.input);
    if (texts.type() != dtype::bytes || texts.shape().size() != 1)
      throw std::runtime_error("tokenize: field '" + cfg_.input + "' is "
                               + to_string(texts)
                               + ", not one text (bytes) per record");
    auto n = texts.rows();
    std::vector<int64_t> ids, lengths;
    lengths.reserve(static_cast<size_t>(n));
    std::string word;
    for (int64_t i = 0; i < n; ++i) {
      auto text = texts.string_at(i);
      int64_t count = 0;
      size_t at = 0;
      while (at < text.size()) {
        while (at < text.size() && !word_byte(static_cast<unsigned char>(text[at])))
          ++at;
        auto start = at;
        while (at < text.size() && word_byte(static_cast<unsigned char>(text[at])))
          ++at;
        if (at == start)
          break;
        if (cfg_.max_tokens > 0 && count == cfg_.max_tokens)
          break;
        word.assign(text.substr(start, at - start));
        if (cfg_.lowercase)
          for (auto& c : word)
            if (c >= 'A' && c <= 'Z')
              c = static_cast<char>(c - 'A' + 'a');
        auto it = vocab_.find(word);
        auto id = it != vocab_.end() ? it->second : cfg_.oov_id;
        if (id < 0)
          continue;
        ids.push_back(id);
        ++count;
      }
      lengths.push_back(count);
    }
    int64_t width = 0;
    for (auto l : lengths)
      width = std::max(width, l);
    auto values = tensor::allocate(dtype::i64, {n, width});
    auto lens = tensor::allocate(dtype::i64, {n});
    auto* dst = values.mutable_data_as<int64_t>();
    size_t from = 0;
    for (int64_t i = 0; i < n; ++i) {
      auto l = lengths[static_cast<size_t>(i)];
      for (int64_t k = 0; k < width; ++k)
        dst[i * width + k] = k < l ? ids[from + static_cast<size_t>(k)] : 0;
      from += static_cast<size_t>(l);
      lens.mutable_data_as<int64_t>()[i] = l;
    }
    item.set(cfg_.output, std::move(values));
    item.set(cfg_.output + "_length", std::move(lens));
    out.push(std::move(item));
  }

private:
  tokenize_config cfg_;
  vocabulary vocab_;
};

std::string check_tokenize(const topology::Stage& s) {
  auto& p = s.tokenize();
  if (p.max_tokens() < 0)
    return "tokenize.max_tokens must be >= 0, got "
           + std::to_string(p.max_tokens());
  if (p.has_oov_id() && p.oov_id() < -1)
    return "tokenize.oov_id must be >= 0, or -1 to drop unknown words";
  if (s.hosts().empty()) {
    try {
      auto v = read_vocabulary(p.vocabulary());
      if (p.oov_id() >= static_cast<int64_t>(v.size()))
        return "tokenize.oov_id " + std::to_string(p.oov_id())
               + " is not a line of the vocabulary ("
               + std::to_string(v.size()) + " words)";
    } catch (const std::exception& e) {
      return std::string{"tokenize.vocabulary: "} + e.what();
    }
  }
  return {};
}

} // namespace

stage_type tokenize_type() {
  stage_type t;
  t.name = "tokenize";
  t.kind = stage_kind::transform;
  t.one_to_one = true;
  t.description = "maps the words of a text field to vocabulary ids";
  t.config_block = "tokenize";
  t.config_required = {"vocabulary"};
  t.check = check_tokenize;
  t.make = [](const stage_info&, const topology::Stage& s) {
    return std::make_shared<tokenize>(tokenize_config_of(s));
  };
  return t;
}

} // namespace af
