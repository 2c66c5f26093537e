#include "actors/builtin.hpp"

#include "actors/batcher.hpp"
#include "actors/sink.hpp"
#include "actors/synthetic_source.hpp"
#include "actors/transform.hpp"

namespace af {

void register_builtin_stages(registry& reg) {
  reg.add(synthetic_source_type());
  reg.add(transform_type());
  reg.add(batcher_type());
  reg.add(sink_type());
}

} // namespace af
