// libFuzzer target: the parameter-server shard snapshot decoder
// (ps_shard_state::restore, format in actors/ps_shard/ps_shard.hpp: a state frame
// of runtime/state/state_io.hpp) on arbitrary bytes, as they are and reframed
// with a right CRC (so that the fuzzer gets past the CRC into the values).
// A snapshot must be refused with std::invalid_argument, leaving the shard
// as it was, or restored into a shard that then serves pulls and pushes
// and snapshots to bytes that restore to the same state; never a crash,
// another exception or an allocation the bytes do not back.
//
// AF_FUZZ_WRITE_SEEDS=DIR: writes real snapshots of a trained shard to DIR
// and exits (tests/fuzz/corpus/README.md).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "actorflow/actors/ps_shard/ps_shard.hpp"
#include "actorflow/runtime/protocol/ps.hpp"
#include "actorflow/runtime/state/state_io.hpp"
#include "tests/fuzz/fuzz_util.hpp"

namespace {

constexpr int64_t table_rows = 40;
constexpr int64_t dim = 3;

// Shard 0 of 2 of a dense [3, 4] kernel and a sparse [40, 3] table, Adam
// (two optimizer slots), synchronous (tau = 0: snapshots hold clocks).
af::ps_shard_config config() {
  af::ps_shard_config c;
  c.shard = 0;
  c.shards = 2;
  af::gpu::param_spec kernel;
  kernel.name = "0_dense/kernel";
  kernel.shape = {3, 4};
  kernel.init_limit = 0.5f;
  af::gpu::param_spec table;
  table.name = "1_embedding/table";
  table.shape = {table_rows, dim};
  table.sparse = true;
  table.init_limit = 0.3f;
  c.params = {kernel, table};
  c.optimizer.type = "adam";
  c.optimizer.learning_rate = 0.05;
  c.staleness = 0;
  c.expected_workers = 2;
  c.seed = 42;
  c.name = "ps[0]";
  return c;
}

af::tensor f32(const std::vector<float>& v, std::vector<int64_t> shape) {
  auto t = af::tensor::allocate(af::dtype::f32, std::move(shape));
  std::copy(v.begin(), v.end(), t.mutable_data_as<float>());
  return t;
}

af::tensor i64(const std::vector<int64_t>& v) {
  auto t =
    af::tensor::allocate(af::dtype::i64, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.mutable_data_as<int64_t>());
  return t;
}

// This shard's first `n` rows of the table.
std::vector<int64_t> my_rows(size_t n) {
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < table_rows && rows.size() < n; ++r)
    if (af::ps_row_shard(r, 2) == 0)
      rows.push_back(r);
  return rows;
}

af::ps_push push(uint32_t worker, uint64_t step, uint64_t read_version,
                 bool topk) {
  auto range = af::ps_dense_slice(12, 0, 2);
  af::ps_push p;
  p.worker = worker;
  p.step = step;
  p.read_version = read_version;
  p.samples = 4;
  af::ps_slice dense;
  dense.var = 0;
  if (topk) {
    dense.index = i64({static_cast<int64_t>(range.lo),
                       static_cast<int64_t>(range.hi - 1)});
    dense.values = f32({0.5f, -1.5f}, {2});
  } else {
    dense.offset = range.lo;
    auto n = static_cast<int64_t>(range.hi - range.lo);
    dense.values = f32(std::vector<float>(static_cast<size_t>(n), 0.25f), {n});
  }
  af::ps_slice rows;
  rows.var = 1;
  auto ids = my_rows(2 + step % 3);
  rows.index = i64(ids);
  auto r = static_cast<int64_t>(ids.size());
  rows.values =
    f32(std::vector<float>(static_cast<size_t>(r * dim), 0.125f * step),
        {r, dim});
  p.grads = {dense, rows};
  return p;
}

// Uses a restored shard the way a resumed job does; errors are answers.
void exercise(af::ps_shard_state& st) {
  af::ps_pull pull;
  pull.worker = 0;
  pull.clock = 0;
  af::ps_slice want;
  want.var = 1;
  want.index = i64(my_rows(3));
  pull.rows = {want};
  std::optional<af::ps_params> answer;
  (void)st.pull(1, pull, answer);
  af::ps_push_ack ack;
  (void)st.push(push(0, st.clock_of(0) + 1, st.version(), false), ack);
  (void)st.push(push(1, st.clock_of(1) + 1, st.version(), true), ack);
  (void)st.take_released();
  (void)st.values(0, {});
  (void)st.values(1, my_rows(2));
}

// Writes a seed, which must restore (throws if not).
void seed(const std::string& path, const std::string& bytes) {
  af::ps_shard_state check{config()};
  check.restore(bytes);
  af::fuzz::write_file(path, bytes);
}

void write_seeds(const std::string& dir) {
  af::ps_shard_state st{config()};
  seed(dir + "/fresh", st.snapshot());
  st.register_worker(0);
  st.register_worker(1);
  af::ps_push_ack ack;
  for (uint64_t step = 1; step <= 2; ++step) {
    if (!st.push(push(0, step, st.version(), step == 2), ack).empty()
        || !st.push(push(1, step, st.version(), false), ack).empty())
      std::abort();
  }
  seed(dir + "/trained", st.snapshot());
  // Worker 0 ahead: its push waits in an incomplete clock.
  if (!st.push(push(0, 3, st.version(), true), ack).empty())
    std::abort();
  seed(dir + "/pending_clock", st.snapshot());
  st.pause(1);
  st.leave(0, false);
  seed(dir + "/paused_and_left", st.snapshot());
}

const std::string snapshot_tag = "ps_shard/2";

// The values of a frame, read past its header whatever its CRC and length
// say; all of `bytes` when they do not start with a frame's header.
std::vector<char> values_of(const std::string& bytes) {
  caf::binary_deserializer source{nullptr, bytes.data(), bytes.size()};
  uint32_t magic = 0;
  uint16_t format = 0;
  std::string tag;
  uint32_t crc = 0;
  size_t n = 0;
  if (source(magic, format, tag, crc) || source.begin_sequence(n))
    return {bytes.begin(), bytes.end()};
  return {bytes.end() - static_cast<std::ptrdiff_t>(source.remaining()),
          bytes.end()};
}

void try_restore(const std::string& bytes) {
  static const auto cfg = config();
  af::ps_shard_state st{cfg};
  auto before = st.snapshot();
  try {
    st.restore(bytes);
  } catch (const std::invalid_argument& e) {
    if (st.snapshot() != before)
      __builtin_trap(); // a refused snapshot changes nothing
    if (std::string_view{e.what()}.substr(0, 6) != "ps[0]:")
      __builtin_trap(); // the error names the shard
    return;
  }
  auto again = st.snapshot();
  af::ps_shard_state copy{cfg};
  copy.restore(again); // must not throw: it is our own snapshot
  if (copy.snapshot() != again)
    __builtin_trap();
  exercise(st);
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  return af::fuzz::write_seeds_or_fuzz(write_seeds);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes{reinterpret_cast<const char*>(data), size};
  try_restore(bytes);
  try_restore(af::frame_state(snapshot_tag, values_of(bytes)));
  return 0;
}
