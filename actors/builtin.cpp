#include "actors/builtin.hpp"

#include "actors/batcher.hpp"
#include "actors/cache.hpp"
#include "actors/csv_source.hpp"
#include "actors/example_parse.hpp"
#include "actors/idx_source.hpp"
#include "actors/image_folder_source.hpp"
#include "actors/image_decode.hpp"
#include "actors/shuffle.hpp"
#include "actors/sink.hpp"
#include "actors/synthetic_source.hpp"
#include "actors/take.hpp"
#include "actors/tfrecord_source.hpp"
#include "actors/transform.hpp"

namespace af {

void register_builtin_stages(registry& reg) {
  reg.add(synthetic_source_type());
  reg.add(transform_type());
  reg.add(batcher_type());
  reg.add(sink_type());
  reg.add(tfrecord_source_type());
  reg.add(idx_source_type());
  reg.add(example_parse_type());
  reg.add(image_decode_type());
  reg.add(shuffle_type());
  reg.add(cache_type());
  reg.add(take_type());
  reg.add(skip_type());
  reg.add(csv_source_type());
  reg.add(image_folder_source_type());
}

} // namespace af
