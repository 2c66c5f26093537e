// ctr_source: synthetic click logs from a planted logistic model, so that a
// CTR model's AUC can be compared with the best achievable one. Record i
// has `features` categorical ids (field "ids", i64 [features]; feature f's
// ids lie in [f * vocabulary, (f + 1) * vocabulary)), its true logit
// bias + sum of the ids' planted weights ("logit", f32) and a click drawn
// with probability sigmoid(logit) ("label", i64 0/1), plus "index". The
// planted weights come from model_seed alone, so a training split and a
// test split (another split_seed) share the model. Records are the same
// every epoch; replicas take every R-th record. Config:
// topology.CtrSourceConfig.
#pragma once

#include "actorflow/runtime/stage/registry.hpp"

namespace af {

stage_type ctr_source_type();

} // namespace af
