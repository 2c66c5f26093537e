// How close image_decode's two CPU paths come to decoding every pixel at
// full size and then cropping and resizing: the window path (only the
// crop's rows and columns, DCT-scaled by n/8 for n <= --window-scales) and
// the whole-image path (full_decode: true; 1/8, 1/4, 3/8 or 1/2). PSNR
// over the 8-bit RGB output, per crop, on a folder of JPEGs, with crops
// as image_decode draws them (random resized crops, seeded, and one center
// crop per image). Prints one JSON line: the distribution of each path's
// PSNR (99 stands for identical), how many crops the two paths gave the
// same bytes, and the DCT scales the window path picked.
//   decode_psnr --images DIR [--crops 4] [--size 224] [--window-scales 4]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "actorflow/runtime/core/random.hpp"
#include "actorflow/runtime/image/image_ops.hpp"
#include "actorflow/runtime/image/jpeg.hpp"

using namespace af;

namespace {

double psnr(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  double se = 0;
  for (size_t i = 0; i < a.size(); ++i)
    se += (a[i] - b[i]) * static_cast<double>(a[i] - b[i]);
  double mse = se / static_cast<double>(a.size());
  return mse == 0 ? 99.0 : 10 * std::log10(255.0 * 255.0 / mse);
}

std::string summary(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
  };
  double mean = 0;
  for (auto x : v)
    mean += x;
  mean /= static_cast<double>(v.size());
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "{\"min\": %.2f, \"p1\": %.2f, \"p5\": %.2f, \"median\": "
                "%.2f, \"mean\": %.2f}",
                v.front(), at(0.01), at(0.05), at(0.5), mean);
  return buf;
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"PSNR of image_decode's window and whole-image paths "
               "against a full-size decode"};
  std::string dir;
  int crops = 4, size = 224, window_scales = 4;
  app.add_option("--images", dir, "Folder of JPEGs (searched recursively)")
    ->required()
    ->check(CLI::ExistingDirectory);
  app.add_option("--crops", crops, "Random resized crops per image")
    ->capture_default_str();
  app.add_option("--size", size, "Output height and width")
    ->capture_default_str();
  app
    .add_option("--window-scales", window_scales,
                "The window path scales by n/8 for n up to this (or not at "
                "all): 4 as image_decode, 7 every scale libjpeg has")
    ->check(CLI::Range(1, 7))
    ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::vector<std::filesystem::path> files;
  for (auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".jpg")
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "decode_psnr: no .jpg files under %s\n", dir.c_str());
    return 1;
  }
  jpeg_codec codec;
  image full, part;
  std::vector<double> window_db, whole_db;
  std::map<int, int> eighths; // the window path's scale n/8 -> crops
  size_t same = 0;            // crops where both paths gave the same bytes
  size_t out_bytes = static_cast<size_t>(size) * size * 3;
  std::vector<uint8_t> ref(out_bytes), got(out_bytes), win(out_bytes);
  for (size_t f = 0; f < files.size(); ++f) {
    std::ifstream in{files[f], std::ios::binary};
    std::string bytes{std::istreambuf_iterator<char>{in}, {}};
    jpeg_info info;
    if (!codec.header(bytes, info) || !codec.decode(bytes, 3, 64000000, full)) {
      std::fprintf(stderr, "decode_psnr: %s: %s\n", files[f].c_str(),
                   codec.error().c_str());
      return 1;
    }
    std::vector<crop_box> boxes{
      center_crop(info.width, info.height, size, size, 0.875)};
    for (int c = 0; c < crops; ++c) {
      record_rng rng{1, static_cast<uint64_t>(c), f};
      boxes.push_back(random_resized_crop(info.width, info.height, rng));
    }
    for (auto& b : boxes) {
      resample_u8(full, b, size, size, false, ref.data());
      for (bool window : {true, false}) {
        auto box = b;
        if (!(window ? codec.decode_window(bytes, 3, 64000000, size, size, box,
                                           part, false, window_scales)
                     : codec.decode_whole(bytes, 3, 64000000, size, size, box,
                                          part, false))) {
          std::fprintf(stderr, "decode_psnr: %s: %s\n", files[f].c_str(),
                       codec.error().c_str());
          return 1;
        }
        resample_u8(part, box, size, size, false, got.data());
        (window ? window_db : whole_db).push_back(psnr(got, ref));
        if (window)
          win = got;
        else
          same += win == got ? 1 : 0;
        if (window) {
          int w = part.full_width > 0 ? part.full_width : part.width;
          ++eighths[w * 8 / info.width];
        }
      }
    }
  }
  std::string scales;
  for (auto [n, count] : eighths)
    scales += (scales.empty() ? "" : ", ") + std::string{"\""}
              + std::to_string(n) + "/8\": " + std::to_string(count);
  std::printf("{\"images\": %zu, \"crops\": %zu, \"size\": %d, "
              "\"window_psnr_db\": %s, \"whole_psnr_db\": %s, "
              "\"same_bytes\": %zu, \"window_scales\": {%s}}\n",
              files.size(), window_db.size(), size, summary(window_db).c_str(),
              summary(whole_db).c_str(), same, scales.c_str());
  return 0;
}
