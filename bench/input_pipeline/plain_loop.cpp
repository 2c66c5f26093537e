// The limit for the input-pipeline benchmark: the same per-image work as
// ActorFlow's decode stage (JPEG decode with DCT scaling, crop, bilinear
// resize, flip, normalize to float32) in a plain loop over JPEG bytes
// preloaded into memory, split over N threads, no actors, no messages.
// --decode full decodes every pixel (TurboJPEG, scales 1/2, 1/4, 1/8);
// --decode window only the crop's window (libjpeg, scales n/8), as
// image_decode's two paths. Prints one JSON line like the peers.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "actorflow/proto/example.pb.h"
#include "actorflow/runtime/core/files.hpp"
#include "actorflow/runtime/formats/tfrecord_reader.hpp"
#include "actorflow/runtime/image/image_ops.hpp"
#include "actorflow/runtime/image/jpeg.hpp"

using namespace af;

int main(int argc, char** argv) {
  CLI::App app{"Plain-loop limit of the input-pipeline benchmark"};
  std::string files;
  int threads = 1, epochs = 3, size = 224, channels = 3;
  std::string op = "random_resized_crop", norm = "imagenet";
  bool fast_dct = false;
  std::string decode = "full";
  int window_scales = 4;
  uint64_t seed = 1;
  app.add_option("--files", files, "TFRecord glob")->required();
  app.add_option("--threads", threads)->capture_default_str();
  app.add_option("--epochs", epochs)->capture_default_str();
  app.add_option("--size", size, "Output height and width")
    ->capture_default_str();
  app.add_option("--channels", channels)->capture_default_str();
  app.add_option("--op", op, "random_resized_crop or resize")
    ->capture_default_str();
  app.add_option("--norm", norm, "imagenet or fmnist")->capture_default_str();
  app.add_flag("--fast-dct", fast_dct);
  app.add_option("--decode", decode,
                 "full (every pixel) or window (the crop's window only)")
    ->check(CLI::IsMember({"full", "window"}))
    ->capture_default_str();
  app.add_option("--window-scales", window_scales,
                 "--decode window scales by n/8 for n up to this, or not at "
                 "all: 4 as image_decode, 7 every scale libjpeg has")
    ->check(CLI::Range(1, 7))
    ->capture_default_str();
  app.add_option("--seed", seed, "Job seed (as runtime.seed)")
    ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  // Each image with the record index ActorFlow's reader gives it (file
  // number << 32 | record number), so that both draw the same crops.
  std::vector<std::string> images;
  std::vector<uint64_t> index;
  tf::Example ex;
  uint64_t file_number = 0;
  for (auto& path : expand_file_patterns({files})) {
    tfrecord_reader r;
    if (!r.open(path)) {
      std::fprintf(stderr, "%s\n", r.error().c_str());
      return 1;
    }
    std::string rec;
    while (r.next(rec) == read_status::ok)
      if (ex.ParseFromString(rec)) {
        images.push_back(
          ex.features().feature().at("image").bytes_list().value(0));
        index.push_back((file_number << 32) | (r.index() - 1));
      }
    ++file_number;
  }
  float mean[3], stddev[3];
  if (norm == "imagenet") {
    float m[3] = {0.485f, 0.456f, 0.406f}, s[3] = {0.229f, 0.224f, 0.225f};
    std::copy(m, m + 3, mean);
    std::copy(s, s + 3, stddev);
  } else {
    std::fill(mean, mean + 3, 0.2860f);
    std::fill(stddev, stddev + 3, 0.3530f);
  }
  auto total = images.size() * static_cast<size_t>(epochs);
  std::atomic<size_t> next{0};
  std::atomic<size_t> failed{0};
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      jpeg_codec codec;
      image img;
      // One batch-sized output buffer per thread, as a batch would be.
      std::vector<float> out(64 * static_cast<size_t>(size) * size
                             * static_cast<size_t>(channels));
      size_t slot = 0;
      for (size_t i; (i = next.fetch_add(1)) < total;) {
        auto& bytes = images[i % images.size()];
        jpeg_info info;
        if (!codec.header(bytes, info)) {
          ++failed;
          continue;
        }
        record_rng rng{seed, i / images.size(), index[i % images.size()]};
        auto box = op == "resize"
                     ? full_image(info.width, info.height)
                     : random_resized_crop(info.width, info.height, rng);
        bool flip = op != "resize" && rng.uniform() < 0.5;
        if (!(decode == "window"
                ? codec.decode_window(info, bytes, channels, 64000000, size,
                                      size, box, img, fast_dct, window_scales)
                : codec.decode_whole(info, bytes, channels, 64000000, size,
                                     size, box, img, fast_dct))) {
          ++failed;
          continue;
        }
        resample_f32(img, box, size, size, flip, mean, stddev,
                     out.data()
                       + slot * static_cast<size_t>(size) * size * channels);
        slot = (slot + 1) % 64;
      }
    });
  for (auto& t : pool)
    t.join();
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                            - start)
                .count();
  std::printf("{\"peer\": \"plain_loop\", \"decode\": \"%s\", "
              "\"threads\": %d, \"images_per_s\": %.1f, \"images\": %zu, "
              "\"seconds\": %.3f, \"failed\": %zu}\n",
              decode.c_str(), threads, static_cast<double>(total) / secs,
              total, secs, failed.load());
  return 0;
}
