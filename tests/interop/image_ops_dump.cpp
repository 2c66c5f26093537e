// Test-only: runs ActorFlow's real image code on a JPEG and writes what it
// produced, for tests/interop/image_ops.py to compare with tf.image and PIL.
//
//   image_ops_dump stage --jpeg FILE --config 'TEXT' [--seed S]
//                        [--records N] --out FILE
//     Makes the registered image_decode stage's logic from TEXT (the body of
//     an image_decode { ... } block), checks it as the topology loader does,
//     and has it process one item of N records (each the same JPEG, with
//     "index" 0..N-1, epoch 0). Writes the output tensor's raw bytes to
//     --out and prints one JSON line: dtype, shape, the image's size, and
//     for op "random_resized_crop" the window of each record as the public
//     af::random_resized_crop draws it from the stage's per-record
//     generator (seed, epoch, index), so that the references can crop the
//     same window.
//
//   image_ops_dump decode --jpeg FILE --min W H --out FILE
//     af::jpeg_codec::decode with the minimum size W x H (the decoder picks
//     its DCT scale from it), 3 channels. Writes the RGB pixels and prints
//     the decoded size.
//
// Exits 2 with a message on stderr for bad arguments or a failure.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <google/protobuf/text_format.h>

#include "actorflow/actors/features/image_decode.hpp"
#include "actorflow/proto/topology.pb.h"
#include "actorflow/runtime/core/batch.hpp"
#include "actorflow/runtime/core/random.hpp"
#include "actorflow/runtime/core/tensor.hpp"
#include "actorflow/runtime/image/image_ops.hpp"
#include "actorflow/runtime/image/jpeg.hpp"
#include "actorflow/runtime/stage/stage.hpp"

namespace {

[[noreturn]] void fail(const std::string& msg) {
  std::cerr << "image_ops_dump: " << msg << "\n";
  std::exit(2);
}

std::string read_file(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  if (!in)
    fail("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const std::string& path, const void* data, size_t size) {
  std::ofstream out{path, std::ios::binary};
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out)
    fail("cannot write " + path);
}

struct collect : af::emitter {
  std::vector<af::batch> items;
  void push(af::batch b) override { items.push_back(std::move(b)); }
  void end_epoch(uint64_t) override {}
};

int run_stage(const std::string& jpeg, const std::string& config,
              uint64_t seed, int records, const std::string& out_path) {
  af::topology::Stage stage;
  stage.set_name("decode");
  stage.set_type("image_decode");
  if (!google::protobuf::TextFormat::ParseFromString(
        config, stage.mutable_image_decode()))
    fail("cannot parse the image_decode config: " + config);
  auto type = af::image_decode_type();
  if (auto problem = type.check(stage); !problem.empty())
    fail("config refused: " + problem);
  af::stage_info info;
  info.name = "decode";
  info.type = "image_decode";
  info.seed = seed;
  auto logic = type.make(info, stage);

  auto data = read_file(jpeg);
  std::vector<std::string_view> images(static_cast<size_t>(records), data);
  af::batch item;
  item.seq = 0;
  item.epoch = 0;
  item.set("image", af::tensor::strings(images));
  auto index = af::tensor::allocate(af::dtype::i64, {records});
  for (int i = 0; i < records; ++i)
    index.mutable_data_as<int64_t>()[i] = i;
  item.set("index", std::move(index));
  collect out;
  logic->process(std::move(item), out);
  logic->finish(out);
  if (out.items.size() != 1)
    fail("the stage pushed " + std::to_string(out.items.size())
         + " items for 1");
  const auto& t = out.items[0].at("image");
  write_file(out_path, t.data(), t.byte_size());

  af::jpeg_codec codec;
  af::jpeg_info header;
  if (!codec.header(data, header))
    fail(codec.error());
  std::ostringstream js;
  js.precision(17);
  js << "{\"dtype\": \"" << (t.type() == af::dtype::u8 ? "u8" : "f32")
     << "\", \"shape\": [";
  for (size_t k = 0; k < t.shape().size(); ++k)
    js << (k ? ", " : "") << t.shape()[k];
  js << "], \"image\": [" << header.width << ", " << header.height << "]";
  const auto& p = stage.image_decode();
  if (p.op() == "random_resized_crop") {
    if (p.ratio_size() == 2 && p.scale_size() != 2)
      fail("give scale with ratio");
    js << ", \"windows\": [";
    for (int i = 0; i < records; ++i) {
      af::record_rng rng{seed, 0, static_cast<uint64_t>(i)};
      auto box = p.ratio_size() == 2
                   ? af::random_resized_crop(header.width, header.height, rng,
                                             p.scale(0), p.scale(1),
                                             p.ratio(0), p.ratio(1))
                 : p.scale_size() == 2
                   ? af::random_resized_crop(header.width, header.height, rng,
                                             p.scale(0), p.scale(1))
                   : af::random_resized_crop(header.width, header.height,
                                             rng);
      js << (i ? ", " : "") << "[" << box.x << ", " << box.y << ", "
         << box.width << ", " << box.height << "]";
    }
    js << "]";
  }
  js << "}";
  std::cout << js.str() << std::endl;
  return 0;
}

int run_decode(const std::string& jpeg, int min_w, int min_h,
               const std::string& out_path) {
  auto data = read_file(jpeg);
  af::jpeg_codec codec;
  af::image img;
  if (!codec.decode(data, 3, 64000000, img, min_w, min_h))
    fail(jpeg + ": " + codec.error());
  write_file(out_path, img.pixels.data(), img.pixels.size());
  std::cout << "{\"width\": " << img.width << ", \"height\": " << img.height
            << "}" << std::endl;
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 2)
      fail("usage: image_ops_dump stage|decode --jpeg FILE ... --out FILE");
    std::string mode = argv[1], jpeg, config, out;
    uint64_t seed = 0;
    int records = 1, min_w = 0, min_h = 0;
    for (int i = 2; i < argc; ++i) {
      std::string a = argv[i];
      auto value = [&] {
        if (i + 1 >= argc)
          fail(a + " needs a value");
        return std::string{argv[++i]};
      };
      if (a == "--jpeg")
        jpeg = value();
      else if (a == "--config")
        config = value();
      else if (a == "--seed")
        seed = std::stoull(value());
      else if (a == "--records")
        records = std::stoi(value());
      else if (a == "--out")
        out = value();
      else if (a == "--min") {
        min_w = std::stoi(value());
        min_h = std::stoi(value());
      } else
        fail("unknown argument " + a);
    }
    if (jpeg.empty() || out.empty())
      fail("--jpeg and --out are required");
    if (mode == "stage")
      return run_stage(jpeg, config, seed, records, out);
    if (mode == "decode")
      return run_decode(jpeg, min_w, min_h, out);
    fail("unknown mode " + mode);
  } catch (const std::exception& e) {
    fail(e.what());
  }
}
