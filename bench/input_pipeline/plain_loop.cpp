// The limit for the input-pipeline benchmark: the same per-image work as
// ActorFlow's decode stage (TurboJPEG decode with DCT scaling, crop,
// bilinear resize, flip, normalize to float32) in a plain loop over JPEG
// bytes preloaded into memory, split over N threads, no actors, no
// messages. Prints one JSON line like the peers.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "proto/example.pb.h"
#include "runtime/files.hpp"
#include "runtime/image_ops.hpp"
#include "runtime/jpeg.hpp"
#include "runtime/tfrecord_reader.hpp"

using namespace af;

int main(int argc, char** argv) {
  CLI::App app{"Plain-loop limit of the input-pipeline benchmark"};
  std::string files;
  int threads = 1, epochs = 3, size = 224, channels = 3;
  std::string op = "random_resized_crop", norm = "imagenet";
  bool fast_dct = false;
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
        int min_w = static_cast<int>(
          std::ceil(size * info.width / std::max(box.width, 1.0)));
        int min_h = static_cast<int>(
          std::ceil(size * info.height / std::max(box.height, 1.0)));
        if (!codec.decode(bytes, channels, 64000000, img, min_w, min_h,
                          fast_dct)) {
          ++failed;
          continue;
        }
        if (img.width != info.width) {
          double sx = static_cast<double>(img.width) / info.width;
          double sy = static_cast<double>(img.height) / info.height;
          box = crop_box{box.x * sx, box.y * sy, box.width * sx,
                         box.height * sy};
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
  std::printf("{\"peer\": \"plain_loop\", \"threads\": %d, \"images_per_s\": "
              "%.1f, \"images\": %zu, \"seconds\": %.3f, \"failed\": %zu}\n",
              threads, static_cast<double>(total) / secs, total, secs,
              failed.load());
  return 0;
}
