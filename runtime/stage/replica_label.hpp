// How the engine names one replica of a stage or a service: "name[k]", in
// logs, errors, checkpoint parts, the census and the coordinator's tables
// (stage_info::label() for a stage's own replica).
#pragma once

#include <cstdint>
#include <string>

namespace af {

/// "name[replica]", e.g. "decode[1]", "ps[0]".
std::string replica_label(const std::string& name, uint32_t replica);

} // namespace af
