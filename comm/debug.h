// Debug levels, as TORCH_DISTRIBUTED_DEBUG: OFF (default), INFO (more context in logs and
// errors), DETAIL (also verify before each collective that all ranks issue the same op with the
// same dtype and counts). Read from DDPKIT_DEBUG, else TORCH_DISTRIBUTED_DEBUG; no other switch
// is needed for the output to show.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"

namespace ddpkit::comm {

enum class DebugLevel { kOff, kInfo, kDetail };

absl::StatusOr<DebugLevel> ParseDebugLevel(std::string_view text);
// The level from the environment (an invalid value is reported once and treated as OFF).
DebugLevel DebugLevelFromEnv();
std::string_view DebugLevelName(DebugLevel level);

}  // namespace ddpkit::comm
