// host_batch (actors/training/host_batch.hpp): RGB images in
// image_decode's HWC layout reach conv2d as CHW.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>

#include <caf/exit_reason.hpp>
#include <caf/send.hpp>

#include "actorflow/actors/ps_shard/ps_shard.hpp"
#include "actorflow/actors/training/evaluator.hpp"
#include "actorflow/actors/training/host_batch.hpp"
#include "actorflow/runtime/core/random.hpp"
#include "actorflow/runtime/ps/ps_client.hpp"
#include "tests/support/harness.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/training_jobs.hpp"

using namespace af;
using namespace af::test;

TEST_CASE("RGB images in image_decode's HWC layout reach conv2d as CHW") {
  training_spec spec;
  spec.input = "image";
  spec.label = "label";
  spec.model.input_shape = {3, 2, 2};
  spec.model.layers = {gpu::layer_spec{}};
  spec.model.layers[0].type = "conv2d";
  spec.model.layers[0].filters = 1;
  spec.model.layers[0].kernel = 1;
  spec.model.layers.push_back(gpu::layer_spec{});
  spec.model.layers[1].type = "dense";
  spec.model.layers[1].units = 2;
  spec.model.loss = "softmax_cross_entropy";
  batch b;
  auto img = tensor::allocate(dtype::f32, {1, 2, 2, 3}); // h, w, c
  auto* p = img.mutable_data_as<float>();
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 2; ++x)
      for (int c = 0; c < 3; ++c)
        p[(y * 2 + x) * 3 + c] = static_cast<float>(100 * c + 10 * y + x);
  auto label = tensor::allocate(dtype::i64, {1});
  *label.mutable_data_as<int64_t>() = 1;
  b.set("image", img);
  b.set("label", label);
  host_batch h;
  to_host(spec, b, h);
  REQUIRE(h.x.size() == 12);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 2; ++x)
        CHECK(h.x[static_cast<size_t>((c * 2 + y) * 2 + x)]
              == static_cast<float>(100 * c + 10 * y + x));
  // Already channels-first: left as it is.
  auto chw = tensor::allocate(dtype::f32, {1, 3, 2, 2});
  for (int i = 0; i < 12; ++i)
    chw.mutable_data_as<float>()[i] = static_cast<float>(i);
  b.set("image", chw);
  to_host(spec, b, h);
  for (int i = 0; i < 12; ++i)
    CHECK(h.x[static_cast<size_t>(i)] == static_cast<float>(i));
}
