// tokenize: splits each record's text into words and maps them to ids
// through a vocabulary file (one word per line, id = 0-based line number),
// as tf.keras's TextVectorization does with a fixed vocabulary. A word is a
// run of ASCII letters, digits, apostrophes and bytes >= 0x80 (UTF-8 text
// keeps its non-ASCII words whole); everything else separates. Output as an
// example_parse var_len feature: "<output>" i64 [n, L] padded with 0 and
// "<output>_length" i64 [n]; the other fields pass through, the text too.
// Config: topology.TokenizeConfig.
#pragma once

#include "actorflow/runtime/stage/registry.hpp"

namespace af {

stage_type tokenize_type();

} // namespace af
