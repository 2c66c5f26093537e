// zip: pairs the records of its inputs in order, the i-th record of each
// input into one record holding the fields of all (tf.data's
// Dataset.zip). Which input an item came from is the producer's stage
// (stage_logic::process_from); pairing in order needs one replica of zip
// and of each input stage, which it checks as items arrive. The output
// holds each input's fields in the order of `input`, each name with that
// input's prefix; without prefixes a name may not come from two inputs,
// but "key" and "index" come from the first. An epoch ends when every
// input ended it; a longer input's records without a partner are dropped
// then, counted in a warning. Its checkpoint state is each input's
// waiting records. Config: topology.ZipConfig.
#pragma once

#include "actorflow/runtime/stage/registry.hpp"

namespace af {

stage_type zip_type();

} // namespace af
