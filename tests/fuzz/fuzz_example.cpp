// libFuzzer target: the example_parse stage on arbitrary serialized
// records (each input is split into records at 0xff 0x00 pairs), with a
// fixed feature spec. Parsing must yield tensors or a std::runtime_error
// naming the feature; nothing else.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "actorflow/actors/builtin.hpp"
#include "actorflow/runtime/stage/registry.hpp"

namespace {

struct null_emitter : af::emitter {
  void push(af::batch) override {}
  void end_epoch(uint64_t) override {}
};

const af::stage_type& parse_type() {
  static af::registry reg = [] {
    af::registry r;
    af::register_builtin_stages(r);
    return r;
  }();
  return *reg.find("example_parse");
}

af::topology::Stage spec() {
  af::topology::Stage s;
  auto* c = s.mutable_example_parse();
  auto* a = c->add_feature();
  a->set_name("image");
  a->set_type("bytes");
  auto* b = c->add_feature();
  b->set_name("label");
  b->set_type("int64");
  auto* f = c->add_feature();
  f->set_name("x");
  f->set_type("float");
  f->add_shape(2);
  f->add_shape(2);
  return s;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string_view> records;
  auto* p = reinterpret_cast<const char*>(data);
  size_t start = 0;
  for (size_t i = 0; i + 1 < size; ++i)
    if (data[i] == 0xff && data[i + 1] == 0x00) {
      records.emplace_back(p + start, i - start);
      start = i + 2;
      ++i;
    }
  records.emplace_back(p + start, size - start);
  static auto s = spec();
  auto logic = parse_type().make(af::stage_info{}, s);
  af::batch item;
  item.set("record", af::tensor::strings(records));
  null_emitter out;
  try {
    logic->process(std::move(item), out);
  } catch (const std::runtime_error&) {
    // a located error: fine
  }
  return 0;
}
