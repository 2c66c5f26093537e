// PNG and WebP decode rates (docs/benchmarks.md, "PNG and WebP decoding"):
// the files preloaded into memory, decoded whole to RGB8 again and again on
// N threads, either by the library's own calls (--mode lib: libspng's
// spng_decode_image, libwebp's WebPDecodeRGBInto, each into a buffer kept
// between images) or by what image_decode runs for them (--mode ours:
// af::image_codec::decode_full, which sniffs the format, reads and checks
// the header, then decodes the same way into an af::image kept between
// images). Prints one JSON line: {"mode": ..., "images": N, "seconds": S,
// "images_per_s": R}.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <spng.h>
#include <webp/decode.h>

#include "actorflow/runtime/core/files.hpp"
#include "actorflow/runtime/image/image_codec.hpp"

using namespace af;

namespace {

// The library's own decode of `data` into `rgb` (resized as needed).
bool lib_decode(const std::string& data, std::vector<uint8_t>& rgb) {
  if (sniff_image(data) == image_format::webp) {
    int w = 0, h = 0;
    if (!WebPGetInfo(reinterpret_cast<const uint8_t*>(data.data()),
                     data.size(), &w, &h))
      return false;
    rgb.resize(static_cast<size_t>(w) * h * 3);
    return WebPDecodeRGBInto(reinterpret_cast<const uint8_t*>(data.data()),
                             data.size(), rgb.data(), rgb.size(), w * 3)
           != nullptr;
  }
  auto* ctx = spng_ctx_new(0);
  size_t need = 0;
  bool ok = ctx != nullptr
            && spng_set_png_buffer(ctx, data.data(), data.size()) == 0
            && spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &need) == 0;
  if (ok) {
    rgb.resize(need);
    ok = spng_decode_image(ctx, rgb.data(), rgb.size(), SPNG_FMT_RGB8, 0) == 0;
  }
  spng_ctx_free(ctx);
  return ok;
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"PNG and WebP decode rates: the libraries' loop or ours"};
  std::vector<std::string> patterns;
  std::string mode = "lib";
  int threads = 1, passes = 3;
  app.add_option("--files", patterns, "Image files or globs")->required();
  app.add_option("--mode", mode, "lib or ours")
    ->check(CLI::IsMember({"lib", "ours"}))
    ->capture_default_str();
  app.add_option("--threads", threads)->check(CLI::Range(1, 256))
    ->capture_default_str();
  app.add_option("--passes", passes, "Passes over the files")
    ->check(CLI::Range(1, 1000000))
    ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::vector<std::string> images;
  for (auto& path : expand_file_patterns(patterns)) {
    std::ifstream in{path, std::ios::binary};
    images.push_back(std::string{std::istreambuf_iterator<char>{in}, {}});
    if (!in && !in.eof()) {
      std::fprintf(stderr, "codec_loop: %s: cannot read\n", path.c_str());
      return 1;
    }
    auto f = sniff_image(images.back());
    if (f != image_format::png && f != image_format::webp) {
      std::fprintf(stderr, "codec_loop: %s: not a PNG or WebP image\n",
                   path.c_str());
      return 1;
    }
  }
  if (images.empty()) {
    std::fprintf(stderr, "codec_loop: no files\n");
    return 1;
  }
  std::atomic<bool> failed{false};
  std::atomic<uint64_t> checksum{0};
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      image_codec codec;
      image img;
      std::vector<uint8_t> rgb;
      uint64_t sum = 0;
      for (int p = 0; p < passes; ++p)
        for (size_t i = static_cast<size_t>(t); i < images.size();
             i += static_cast<size_t>(threads)) {
          bool ok = mode == "lib"
                      ? lib_decode(images[i], rgb)
                      : codec.decode_full(images[i], 3, uint64_t{1} << 30, img);
          if (!ok) {
            failed = true;
            return;
          }
          sum += mode == "lib" ? rgb[rgb.size() / 2] : img.pixels[img.pixels.size() / 2];
        }
      checksum += sum;
    });
  for (auto& th : pool)
    th.join();
  double seconds = std::chrono::duration<double>(
                     std::chrono::steady_clock::now() - start)
                     .count();
  if (failed) {
    std::fprintf(stderr, "codec_loop: a decode failed\n");
    return 1;
  }
  auto n = static_cast<double>(images.size()) * passes;
  std::printf("{\"mode\": \"%s\", \"images\": %.0f, \"seconds\": %.3f, "
              "\"images_per_s\": %.1f, \"checksum\": %llu}\n",
              mode.c_str(), n, seconds, n / seconds,
              static_cast<unsigned long long>(checksum.load()));
  return 0;
}
