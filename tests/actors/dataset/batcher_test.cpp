// batcher: bytes tensors and fixed tensors stacked alike.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include <google/protobuf/text_format.h>

#include "actorflow/actors/features/image_decode.hpp"
#include "actorflow/gpu/jpeg_decoder.hpp"
#include "actorflow/proto/example.pb.h"
#include "actorflow/runtime/formats/tfrecord_writer.hpp"
#include "actorflow/runtime/image/jpeg.hpp"
#include "actorflow/runtime/job/autotune.hpp"
#include "actorflow/runtime/stage/registry.hpp"
#include "tests/support/harness.hpp"
#include "tests/support/records.hpp"
#include "tests/support/temp_dir.hpp"

using namespace af;
using namespace af::test;

TEST_CASE("the batcher stacks bytes tensors and fixed tensors alike",
          "[input]") {
  registry reg = make_registry(std::make_shared<observations>());
  topology::Stage s;
  s.set_type("batcher");
  s.mutable_batcher()->set_batch_size(5);
  auto logic = reg.find("batcher")->make(stage_info{}, s);
  collecting_emitter out;
  for (int item = 0; item < 3; ++item) {
    std::vector<std::string> strs;
    std::vector<std::string_view> views;
    for (int i = 0; i < 3; ++i)
      strs.push_back(std::string(static_cast<size_t>(item * 3 + i), 'a' + i));
    for (auto& x : strs)
      views.push_back(x);
    batch b;
    b.set("s", tensor::strings(views));
    auto n = tensor::allocate(dtype::i32, {3, 2});
    for (int i = 0; i < 6; ++i)
      n.mutable_data_as<int32_t>()[i] = item * 6 + i;
    b.set("n", std::move(n));
    logic->process(std::move(b), out);
  }
  logic->finish(out);
  REQUIRE(out.items.size() == 2);
  CHECK(out.items[0].records() == 5);
  CHECK(out.items[1].records() == 4);
  CHECK(out.items[0].at("s").string_at(4).size() == 4);  // item 1, row 1
  CHECK(out.items[1].at("n").data_as<int32_t>()[7] == 17);
}
