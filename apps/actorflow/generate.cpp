// `actorflow generate criteo`: a Criteo-like click log whose labels come
// from a planted logistic model, so that a CTR model's AUC can be set
// beside the best one reachable. Columns label, I1..I13 (long-tailed
// counts), C1..C26 (8-hex-digit ids, Zipf-distributed over per-column
// vocabularies), planted_logit; a missing cell is empty. Every number comes
// from --seed through record_rng streams, so the same arguments give the
// same bytes. docs/generate.md has the tables and the formulas.
#include "apps/actorflow/generate.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "actorflow/runtime/core/random.hpp"
#include "actorflow/version.hpp"
#include "apps/actorflow/options.hpp"
#include "apps/actorflow/progress.hpp"

namespace af::cli {

namespace {

using json = nlohmann::ordered_json;

constexpr int n_numeric = 13;
constexpr int n_categorical = 26;

// I_k = min(floor(exp(X)), numeric_cap) with X ~ N(mu, sigma^2): counts
// whose medians and missing rates follow Criteo's columns loosely.
// `weight`: |a_k| at --weight-scale 1 (its sign is drawn from the seed).
struct numeric_spec {
  double mu, sigma, missing, weight;
};
constexpr numeric_spec numeric_table[n_numeric] = {
  {0.3, 1.2, 0.40, 0.30},  {1.2, 1.8, 0.00, 0.15}, {2.0, 1.3, 0.21, 0.10},
  {1.6, 0.9, 0.22, 0.20},  {7.8, 1.8, 0.03, 0.10}, {3.5, 1.6, 0.22, 0.20},
  {1.3, 1.5, 0.04, 0.30},  {2.1, 1.0, 0.01, 0.10}, {3.7, 1.4, 0.04, 0.15},
  {-0.3, 0.8, 0.40, 0.25}, {0.6, 1.0, 0.04, 0.35}, {-1.0, 1.5, 0.40, 0.10},
  {1.5, 1.0, 0.22, 0.15},
};

// Column j has `vocabulary` values; rank r is drawn with probability
// proportional to 1/(r+1)^zipf. Sizes follow Criteo's (Kaggle) columns,
// capped to 4..200,000. `sigma`: the spread of the value weights at
// --weight-scale 1.
struct categorical_spec {
  int64_t vocabulary;
  double zipf, missing, sigma;
};
constexpr categorical_spec categorical_table[n_categorical] = {
  {1460, 1.10, 0.00, 0.5},   {583, 1.08, 0.00, 0.4},
  {200000, 1.15, 0.03, 0.6}, {120000, 1.12, 0.03, 0.5},
  {305, 1.05, 0.00, 0.4},    {24, 1.10, 0.12, 0.3},
  {12517, 1.10, 0.00, 0.5},  {633, 1.06, 0.00, 0.3},
  {4, 1.20, 0.00, 0.3},      {93145, 1.12, 0.00, 0.5},
  {5683, 1.08, 0.00, 0.4},   {180000, 1.18, 0.03, 0.6},
  {3194, 1.07, 0.00, 0.4},   {27, 1.10, 0.00, 0.3},
  {14992, 1.10, 0.00, 0.5},  {150000, 1.16, 0.03, 0.5},
  {10, 1.15, 0.00, 0.3},     {5652, 1.09, 0.00, 0.4},
  {2173, 1.12, 0.25, 0.4},   {4, 1.05, 0.25, 0.3},
  {160000, 1.17, 0.03, 0.6}, {18, 1.10, 0.30, 0.3},
  {15, 1.08, 0.00, 0.3},     {100000, 1.14, 0.03, 0.5},
  {105, 1.06, 0.28, 0.3},    {142572, 1.13, 0.28, 0.5},
};

constexpr int64_t numeric_cap = 2147483647; // the largest int32
// A value's weight spread shrinks as 1/sqrt(1 + rank/rank_scale): values
// seen thousands of times in 2 M rows carry the signal; values seen a few
// times, which no model can learn and which share hash buckets, little.
constexpr double rank_scale = 32;
// Rows drawn to set the bias to the click rate asked for.
constexpr int64_t calibration_rows = 32768;
constexpr double default_weight_scale = 0.8;

// record_rng streams (its `epoch` argument), all from --seed.
constexpr uint64_t stream_model = 0x6d6f64656cULL;       // "model"
constexpr uint64_t stream_calibration = 0x63616c6962ULL; // "calib"
constexpr uint64_t stream_train = 0x747261696eULL;       // "train"
constexpr uint64_t stream_test = 0x74657374ULL;          // "test"

struct criteo_args {
  std::string out;
  int64_t rows = 2000000;
  int64_t test_rows = 100000;
  uint64_t seed = 1;
  double missing_rate = std::nan(""); // NaN: the per-column tables
  double weight_scale = default_weight_scale;
  double click_rate = 0.25;
};

constexpr double two_pi = 6.283185307179586;

// n standard normals (Box-Muller, both outputs of each pair).
void normals(record_rng& rng, double* out, int n) {
  for (int i = 0; i < n; i += 2) {
    double r = std::sqrt(-2.0 * std::log(1.0 - rng.uniform()));
    double t = two_pi * rng.uniform();
    out[i] = r * std::cos(t);
    if (i + 1 < n)
      out[i + 1] = r * std::sin(t);
  }
}

// P(Z > z) and the density, Z standard normal.
double upper_tail(double z) {
  return 0.5 * std::erfc(z / std::sqrt(2.0));
}
double density(double z) {
  return std::exp(-0.5 * z * z) / std::sqrt(two_pi);
}

// P(a <= Z < b), without cancellation in either tail.
double mass(double a, double b) {
  return a > 0 ? upper_tail(a) - upper_tail(b)
               : upper_tail(-b) - upper_tail(-a);
}

// E[log1p(I)] and E[log1p(I)^2] for I = min(floor(exp(X)), numeric_cap),
// X ~ N(mu, sigma^2). Summed value by value while I < 2^18 (I = n for X in
// [ln n, ln(n+1))); above, log1p(floor(e^X)) lies in [X, X + 2^-18], so X's
// truncated moments stand in for it (error below 2^-18 times the tail's
// probability).
std::pair<double, double> log1p_moments(double mu, double sigma) {
  constexpr int64_t exact_below = int64_t{1} << 18;
  double m1 = 0, m2 = 0;
  int64_t n = 1;
  double lo = -mu / sigma; // (ln n - mu) / sigma
  for (; n < exact_below && lo < 9; ++n) {
    double v = std::log1p(static_cast<double>(n)); // ln(n + 1)
    double hi = (v - mu) / sigma;
    double p = mass(lo, hi);
    m1 += p * v;
    m2 += p * v * v;
    lo = hi;
  }
  double b = (std::log(static_cast<double>(numeric_cap)) - mu) / sigma;
  if (lo < b) {
    double p = mass(lo, b), d = density(lo) - density(b);
    m1 += mu * p + sigma * d;
    m2 += (mu * mu + sigma * sigma) * p + 2 * mu * sigma * d
          + sigma * sigma * (lo * density(lo) - b * density(b));
  }
  double capped = std::log1p(static_cast<double>(numeric_cap));
  m1 += upper_tail(b) * capped;
  m2 += upper_tail(b) * capped * capped;
  return {m1, m2};
}

// A bijection on 32 bits (Wellons' lowbias32): distinct ranks of a column
// print distinct strings.
uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

struct numeric_column {
  numeric_spec spec;
  double missing;   // after --missing-rate
  double weight;    // a_k
  double mean, std; // of log1p(I_k), a missing cell counted as 0
};

struct categorical_column {
  categorical_spec spec;
  double missing;              // after --missing-rate
  std::vector<double> cdf;     // cdf[r] = P(rank <= r)
  std::vector<uint32_t> guide; // guide[k]: the rank that u = k/G falls on
  std::vector<double> weight;  // by rank
  double missing_weight;
  uint32_t key; // of the hex strings: the column's offset before mix32

  // The rank with cdf[rank - 1] <= u < cdf[rank]; u in [0, 1).
  uint32_t draw(double u) const {
    auto g = guide.size() - 1;
    auto k = std::min(static_cast<size_t>(u * static_cast<double>(g)), g - 1);
    const double* p = cdf.data();
    auto r = std::upper_bound(p + guide[k], p + guide[k + 1] + 1, u) - p;
    return static_cast<uint32_t>(std::min<ptrdiff_t>(r, ssize(cdf) - 1));
  }
};

struct planted_model {
  numeric_column num[n_numeric];
  std::vector<categorical_column> cat;
  double bias = 0;
};

categorical_column make_categorical(const criteo_args& a, int j) {
  categorical_column c;
  c.spec = categorical_table[j];
  c.missing = std::isnan(a.missing_rate) ? c.spec.missing : a.missing_rate;
  auto v = static_cast<size_t>(c.spec.vocabulary);
  c.cdf.resize(v);
  double total = 0;
  for (size_t r = 0; r < v; ++r) {
    total += std::pow(static_cast<double>(r + 1), -c.spec.zipf);
    c.cdf[r] = total;
  }
  for (auto& p : c.cdf)
    p /= total;
  c.cdf.back() = 1.0;
  auto g = std::min<size_t>(v, size_t{1} << 16);
  c.guide.resize(g + 1);
  for (size_t k = 0; k <= g; ++k) {
    auto u = static_cast<double>(k) / static_cast<double>(g);
    auto r = std::upper_bound(c.cdf.begin(), c.cdf.end(), u) - c.cdf.begin();
    c.guide[k] =
      static_cast<uint32_t>(std::min<ptrdiff_t>(r, ssize(c.cdf) - 1));
  }
  record_rng rng{a.seed, stream_model, static_cast<uint64_t>(j)};
  double sigma = a.weight_scale * c.spec.sigma;
  normals(rng, &c.missing_weight, 1);
  c.missing_weight *= sigma;
  c.weight.resize(v);
  normals(rng, c.weight.data(), static_cast<int>(v));
  for (size_t r = 0; r < v; ++r)
    c.weight[r] *= sigma / std::sqrt(1.0 + static_cast<double>(r) / rank_scale);
  c.key = static_cast<uint32_t>(mix64(0x43726974656fULL + j)); // "Criteo"
  return c;
}

// A row as drawn: the cells and the part of the logit without the bias.
struct row {
  int64_t num[n_numeric];     // -1: missing
  int64_t cat[n_categorical]; // rank; -1: missing
  double score;
};

void draw_row(const planted_model& m, record_rng& rng, row& out) {
  double x[n_numeric + 1];
  normals(rng, x, n_numeric + 1);
  double score = 0;
  for (int k = 0; k < n_numeric; ++k) {
    auto& c = m.num[k];
    bool missing = rng.uniform() < c.missing;
    double e = std::min(std::exp(c.spec.mu + c.spec.sigma * x[k]),
                        static_cast<double>(numeric_cap));
    int64_t v = missing ? 0 : static_cast<int64_t>(e);
    out.num[k] = missing ? -1 : v;
    score += c.weight * (std::log1p(static_cast<double>(v)) - c.mean) / c.std;
  }
  for (int j = 0; j < n_categorical; ++j) {
    auto& c = m.cat[static_cast<size_t>(j)];
    bool missing = rng.uniform() < c.missing;
    auto rank = c.draw(rng.uniform());
    out.cat[j] = missing ? -1 : static_cast<int64_t>(rank);
    score += missing ? c.missing_weight : c.weight[rank];
  }
  out.score = score;
}

// The printed logit: 6 decimals, so that the file's text reads back as the
// very double the label was drawn from and the AUC computed from.
double quantize(double logit) {
  double q = std::round(logit * 1e6) / 1e6;
  return q == 0 ? 0.0 : q; // no "-0.000000"
}

double sigmoid(double z) {
  return 1.0 / (1.0 + std::exp(-z));
}

planted_model make_model(const criteo_args& a) {
  planted_model m;
  record_rng signs{a.seed, stream_model, 1000};
  for (int k = 0; k < n_numeric; ++k) {
    auto& c = m.num[k];
    c.spec = numeric_table[k];
    c.missing = std::isnan(a.missing_rate) ? c.spec.missing : a.missing_rate;
    double sign = signs.uniform() < 0.5 ? -1.0 : 1.0;
    c.weight = sign * a.weight_scale * c.spec.weight;
    auto [m1, m2] = log1p_moments(c.spec.mu, c.spec.sigma);
    c.mean = (1 - c.missing) * m1;
    c.std = std::sqrt((1 - c.missing) * m2 - c.mean * c.mean);
  }
  for (int j = 0; j < n_categorical; ++j)
    m.cat.push_back(make_categorical(a, j));
  // The bias: the mean click probability over a sample of rows is the
  // rate asked for. The mean grows with the bias: Newton's steps, kept
  // inside a bracket that bisection narrows when a step leaves it.
  std::vector<double> scores(static_cast<size_t>(calibration_rows));
  double reach = 0;
  row r;
  for (int64_t i = 0; i < calibration_rows; ++i) {
    record_rng rng{a.seed, stream_calibration, static_cast<uint64_t>(i)};
    draw_row(m, rng, r);
    scores[static_cast<size_t>(i)] = r.score;
    reach = std::max(reach, std::abs(r.score));
  }
  double lo = -reach - 50, hi = reach + 50;
  double b = std::log(a.click_rate / (1 - a.click_rate));
  auto n = static_cast<double>(scores.size());
  for (int it = 0; it < 200; ++it) {
    double f = -a.click_rate, slope = 0;
    for (auto s : scores) {
      double p = sigmoid(b + s);
      f += p / n;
      slope += p * (1 - p) / n;
    }
    if (std::abs(f) < 1e-12)
      break;
    (f < 0 ? lo : hi) = b;
    double next = b - f / slope;
    b = next > lo && next < hi ? next : 0.5 * (lo + hi);
  }
  m.bias = b;
  return m;
}

// A CSV row: label,I1..I13,C1..C26,planted_logit.
void append_row(std::string& out, const planted_model& m, const row& r,
                bool label, double logit) {
  static constexpr char hex[] = "0123456789abcdef";
  char line[1024];
  char* p = line;
  char* end = line + sizeof line;
  *p++ = label ? '1' : '0';
  for (auto v : r.num) {
    *p++ = ',';
    if (v >= 0)
      p = std::to_chars(p, end, v).ptr;
  }
  for (int j = 0; j < n_categorical; ++j) {
    *p++ = ',';
    if (r.cat[j] < 0)
      continue;
    auto h = mix32(m.cat[static_cast<size_t>(j)].key
                   + static_cast<uint32_t>(r.cat[j]));
    for (int shift = 28; shift >= 0; shift -= 4)
      *p++ = hex[(h >> shift) & 0xf];
  }
  *p++ = ',';
  p = std::to_chars(p, end - 1, logit, std::chars_format::fixed, 6).ptr;
  *p++ = '\n';
  out.append(line, p);
}

constexpr const char* header_line =
  "label,I1,I2,I3,I4,I5,I6,I7,I8,I9,I10,I11,I12,I13,C1,C2,C3,C4,C5,C6,C7,C8,"
  "C9,C10,C11,C12,C13,C14,C15,C16,C17,C18,C19,C20,C21,C22,C23,C24,C25,C26,"
  "planted_logit\n";

// The AUC of `scored` (score, label): the positives' rank sum, tied scores
// sharing their mean rank. nullopt when one class is absent.
std::optional<double> auc_of(std::vector<std::pair<double, bool>>& scored) {
  std::sort(scored.begin(), scored.end());
  double positives = 0, rank_sum = 0;
  size_t n = scored.size();
  for (size_t i = 0; i < n;) {
    size_t j = i;
    double pos = 0;
    for (; j < n && scored[j].first == scored[i].first; ++j)
      pos += scored[j].second ? 1 : 0;
    rank_sum += pos * 0.5 * static_cast<double>(i + 1 + j);
    positives += pos;
    i = j;
  }
  double negatives = static_cast<double>(n) - positives;
  if (positives == 0 || negatives == 0)
    return std::nullopt;
  return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

// An output file written through a large buffer.
class output_file {
public:
  ~output_file() {
    if (f_ != nullptr)
      std::fclose(f_);
  }

  /// Empty on success, else "PATH: cannot write: reason".
  std::string open(const std::string& path) {
    path_ = path;
    f_ = std::fopen(path.c_str(), "wb");
    err_ = f_ != nullptr ? 0 : errno;
    return problem();
  }
  std::string& buffer() { return buf_; }
  /// Writes the buffer out once it holds 1 MiB (always, with `force`);
  /// false once a write failed.
  bool flush(bool force = false) {
    if (!force && buf_.size() < (size_t{1} << 20))
      return err_ == 0;
    if (err_ == 0
        && std::fwrite(buf_.data(), 1, buf_.size(), f_) != buf_.size())
      err_ = errno != 0 ? errno : EIO;
    buf_.clear();
    return err_ == 0;
  }
  /// Empty on success, else what went wrong, naming the file.
  std::string close() {
    flush(true);
    if (std::fclose(f_) != 0 && err_ == 0)
      err_ = errno;
    f_ = nullptr;
    return problem();
  }
  const std::string& path() const { return path_; }

private:
  std::string problem() const {
    return err_ == 0 ? std::string{}
                     : path_ + ": cannot write: " + std::strerror(err_);
  }

  std::string path_, buf_;
  std::FILE* f_ = nullptr;
  int err_ = 0;
};

struct split_stats {
  int64_t rows = 0, clicks = 0;
  std::optional<double> auc;
  double click_rate() const { return rows > 0 ? 1.0 * clicks / rows : 0.0; }
};

// Rows of one split, on a terminal with a line rewritten every second.
std::string write_split(output_file& file, const planted_model& m,
                        const criteo_args& a, uint64_t stream, int64_t rows,
                        split_stats& stats) {
  bool terminal = isatty(STDERR_FILENO) == 1;
  auto name = std::filesystem::path{file.path()}.filename().string();
  auto last = std::chrono::steady_clock::now();
  std::vector<std::pair<double, bool>> scored(static_cast<size_t>(rows));
  file.buffer() += header_line;
  row r;
  for (int64_t i = 0; i < rows; ++i) {
    record_rng rng{a.seed, stream, static_cast<uint64_t>(i)};
    draw_row(m, rng, r);
    double logit = quantize(m.bias + r.score);
    bool label = rng.uniform() < sigmoid(logit);
    stats.clicks += label ? 1 : 0;
    scored[static_cast<size_t>(i)] = {logit, label};
    append_row(file.buffer(), m, r, label, logit);
    if (!file.flush())
      return file.close();
    if (terminal && (i & 4095) == 0) {
      auto now = std::chrono::steady_clock::now();
      if (now - last >= std::chrono::seconds{1}) {
        last = now;
        std::fprintf(stderr, "\r\033[Kgenerating %s: %s / %s rows",
                     name.c_str(), human_count(static_cast<double>(i)).c_str(),
                     human_count(static_cast<double>(rows)).c_str());
      }
    }
  }
  if (terminal)
    std::fprintf(stderr, "\r\033[K");
  stats.rows = rows;
  stats.auc = auc_of(scored);
  return file.close();
}

json planted_json(const criteo_args& a, const planted_model& m,
                  const split_stats& train, const split_stats& test) {
  auto each = [](const auto& columns, auto field) {
    auto v = json::array();
    for (auto& c : columns)
      v.push_back(field(c));
    return v;
  };
  using num = const numeric_column&;
  using cat = const categorical_column&;
  json j;
  j["generator"] = std::string{"actorflow "} + af::version + " generate criteo";
  j["seed"] = a.seed;
  j["rows"] = a.rows;
  j["test_rows"] = a.test_rows;
  j["weight_scale"] = a.weight_scale;
  j["target_click_rate"] = a.click_rate;
  j["click_rate"] = train.click_rate();
  j["click_rate_test"] = test.click_rate();
  for (auto [key, auc] : {std::pair{"planted_auc_train", train.auc},
                          std::pair{"planted_auc_test", test.auc}})
    j[key] = auc ? json(*auc) : json(nullptr);
  j["bias"] = m.bias;
  j["numeric_mean"] = each(m.num, [](num c) { return c.mean; });
  j["numeric_std"] = each(m.num, [](num c) { return c.std; });
  j["numeric_missing_rates"] = each(m.num, [](num c) { return c.missing; });
  j["numeric_log_mu"] = each(m.num, [](num c) { return c.spec.mu; });
  j["numeric_log_sigma"] = each(m.num, [](num c) { return c.spec.sigma; });
  j["numeric_weights"] = each(m.num, [](num c) { return c.weight; });
  j["vocabulary_sizes"] = each(m.cat, [](cat c) { return c.spec.vocabulary; });
  j["categorical_missing_rates"] = each(m.cat, [](cat c) { return c.missing; });
  j["zipf_exponents"] = each(m.cat, [](cat c) { return c.spec.zipf; });
  j["categorical_weight_std"] =
    each(m.cat, [&](cat c) { return a.weight_scale * c.spec.sigma; });
  j["categorical_missing_weights"] =
    each(m.cat, [](cat c) { return c.missing_weight; });
  j["rank_scale"] = rank_scale;
  return j;
}

std::string number(double v, const char* format = "%g") {
  char buf[32];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// Prints a one-line error; returns `code`.
int fail(const std::string& message, int code = exit_usage) {
  std::fprintf(stderr, "actorflow: %s\n", message.c_str());
  return code;
}

int generate_criteo(const criteo_args& a) {
  if (a.rows < 1)
    return fail("--rows must be at least 1, got " + std::to_string(a.rows));
  if (a.test_rows < 0)
    return fail("--test-rows must be at least 0, got "
                + std::to_string(a.test_rows));
  if (!std::isnan(a.missing_rate)
      && !(a.missing_rate >= 0 && a.missing_rate < 1))
    return fail("--missing-rate must be in [0, 1), got "
                + number(a.missing_rate));
  if (!(a.weight_scale >= 0 && a.weight_scale <= 100))
    return fail("--weight-scale must be in [0, 100], got "
                + number(a.weight_scale));
  if (!(a.click_rate > 0 && a.click_rate < 1))
    return fail("--click-rate must be in (0, 1), got " + number(a.click_rate));
  std::filesystem::path dir{a.out};
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return fail(a.out + ": cannot create the folder: " + ec.message());
  output_file train_file, test_file, json_file;
  for (auto [file, name] :
       {std::pair{&train_file, "train.csv"}, std::pair{&test_file, "test.csv"},
        std::pair{&json_file, "planted.json"}}) {
    auto problem = file->open((dir / name).string());
    if (!problem.empty())
      return fail(problem);
  }

  auto begin = std::chrono::steady_clock::now();
  auto model = make_model(a);
  split_stats train, test;
  for (auto [file, stream, rows, stats] :
       {std::tuple{&train_file, stream_train, a.rows, &train},
        std::tuple{&test_file, stream_test, a.test_rows, &test}}) {
    auto problem = write_split(*file, model, a, stream, rows, *stats);
    if (!problem.empty())
      return fail(problem, exit_failure);
  }
  json_file.buffer() = planted_json(a, model, train, test).dump(2) + "\n";
  auto problem = json_file.close();
  if (!problem.empty())
    return fail(problem, exit_failure);
  double secs =
    std::chrono::duration<double>(std::chrono::steady_clock::now() - begin)
      .count();
  for (auto [file, stats] :
       {std::pair{&train_file, &train}, std::pair{&test_file, &test}}) {
    auto auc = stats->auc ? number(*stats->auc, "%.4f")
                          : std::string{"n/a (needs both labels)"};
    std::printf("wrote %s: %lld rows, click rate %.4f, planted AUC %s\n",
                file->path().c_str(), static_cast<long long>(stats->rows),
                stats->click_rate(), auc.c_str());
  }
  std::printf("wrote %s (the planted model) in %.1f s\n",
              json_file.path().c_str(), secs);
  return exit_ok;
}

constexpr const char* criteo_help = R"(
Files in --out DIR (created if missing; existing files are replaced):
  train.csv, test.csv  a header row, then per row: label (0/1), I1..I13
                       (counts, non-negative integers), C1..C26 (8 lowercase
                       hex digits), planted_logit (6 decimals). A missing
                       cell is empty.
  planted.json         the model: seed, rows, test_rows, vocabulary_sizes,
                       numeric_missing_rates, categorical_missing_rates,
                       numeric_mean, numeric_std, bias, weights, click_rate,
                       click_rate_test, planted_auc_train, planted_auc_test.
Data: I_k = floor(exp(N(mu_k, sigma_k^2))) (capped at 2^31-1); column C_j
has its own vocabulary (4 to 200,000 values) drawn Zipf-like, rank r with
probability ~ 1/(r+1)^s_j (s_j 1.05 to 1.2); each column has its own missing
rate (I: 0-40%, C: 0-30%; --missing-rate sets one for all).
Planted model: logit = bias + sum_k a_k z_k + sum_j w_j[C_j], with
z_k = (log1p(I_k) - numeric_mean[k]) / numeric_std[k] (a missing I_k counts
as 0; the mean and std are those of that column) and w_j ~ N(0, sigma_j^2) /
sqrt(1 + rank/32) (an empty C_j has a weight of its own); label ~
Bernoulli(sigmoid(logit)); the bias gives --click-rate. planted_auc_*: the
AUC of planted_logit against the labels, the best a model can expect.
Same arguments, same bytes: everything comes from --seed; test.csv is an
independent sample of the same model. See docs/generate.md.)";

} // namespace

void add_generate(CLI::App& app, std::function<int()>& action) {
  auto* generate = app.add_subcommand(
    "generate", "Generate a synthetic dataset with a known best model");
  generate->require_subcommand(1);

  auto a = std::make_shared<criteo_args>();
  auto* criteo = generate->add_subcommand(
    "criteo", "A Criteo-like click log (CSV: label, 13 counts, 26 hashed "
              "categories) with labels from a planted logistic model");
  criteo->add_option("--out", a->out, "Output folder DIR")->required();
  criteo->add_option("--rows", a->rows, "Rows of DIR/train.csv (>= 1)")
    ->capture_default_str();
  criteo->add_option("--test-rows", a->test_rows, "Rows of DIR/test.csv (>= 0)")
    ->capture_default_str();
  criteo->add_option("--seed", a->seed, "Seed of the model and of both splits")
    ->capture_default_str();
  criteo->add_option("--missing-rate", a->missing_rate,
                     "One missing rate in [0, 1) for all 39 columns "
                     "(default: each column its own, 0-40%)");
  criteo
    ->add_option("--weight-scale", a->weight_scale,
                 "Multiplies every planted weight: larger is a stronger "
                 "signal, a higher planted AUC (0 to 100)")
    ->capture_default_str();
  criteo
    ->add_option("--click-rate", a->click_rate,
                 "Share of label 1 the bias aims at, in (0, 1)")
    ->capture_default_str();
  criteo->footer(criteo_help);
  criteo->callback([a, &action] {
    action = [a] {
      return generate_criteo(*a);
    };
  });
}

} // namespace af::cli
