// What the per-feature stages (hash_bucket, numeric) share: finding an
// item's input field with an error that names it and the fields the item
// does have, naming a record in an error, and refusing a config whose
// features write the same output twice.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actorflow/runtime/core/batch.hpp"
#include "actorflow/runtime/stage/stage.hpp"

namespace af {

/// The field `name` of `item`; throws af::input_error "STAGE: the item has
/// no field 'NAME' (it has: a, b, ...)" when there is none.
inline const tensor& feature_field(const batch& item, const std::string& name,
                                   const std::string& stage) {
  if (auto* t = item.find(name))
    return *t;
  std::string have;
  for (auto& f : item.fields)
    have += (have.empty() ? "" : ", ") + f.name;
  throw input_error(stage + ": the item has no field '" + name
                    + "' (it has: " + (have.empty() ? "none" : have) + ")");
}

/// Record `i` of `item` for an error message: its key ("FILE:LINE",
/// "FILE@OFFSET") where the item has one, else "record I of item SEQ".
inline std::string feature_record(const batch& item, int64_t i) {
  auto* keys = item.find("key");
  if (keys != nullptr && keys->type() == dtype::bytes
      && keys->shape().size() == 1 && i < keys->elements())
    return std::string{keys->string_at(i)};
  return "record " + std::to_string(i) + " of item " + std::to_string(item.seq);
}

/// "" when every output of `outputs` (one per feature, in config order) is
/// distinct, else "STAGE.feature[J]: output 'X' is also feature[I]'s".
inline std::string
duplicate_feature_output(const std::vector<std::string>& outputs,
                         const std::string& stage) {
  for (size_t j = 0; j < outputs.size(); ++j)
    for (size_t i = 0; i < j; ++i)
      if (outputs[i] == outputs[j])
        return stage + ".feature[" + std::to_string(j) + "]: output '"
               + outputs[j] + "' is also feature[" + std::to_string(i)
               + "]'s (outputs must differ)";
  return {};
}

} // namespace af
