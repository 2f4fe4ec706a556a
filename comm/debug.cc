#include "comm/debug.h"

#include <cstdlib>

#include "autograd/base/error.h"
#include "autograd/base/log.h"

namespace ddpkit::comm {

absl::StatusOr<DebugLevel> ParseDebugLevel(std::string_view text) {
  if (text.empty() || text == "OFF" || text == "off" || text == "0") return DebugLevel::kOff;
  if (text == "INFO" || text == "info") return DebugLevel::kInfo;
  if (text == "DETAIL" || text == "detail") return DebugLevel::kDetail;
  return absl::InvalidArgumentError(
      StrCat("debug level '", text, "' is not one of OFF, INFO, DETAIL"));
}

DebugLevel DebugLevelFromEnv() {
  const char* value = std::getenv("DDPKIT_DEBUG");
  const char* name = "DDPKIT_DEBUG";
  if (value == nullptr) {
    value = std::getenv("TORCH_DISTRIBUTED_DEBUG");
    name = "TORCH_DISTRIBUTED_DEBUG";
  }
  if (value == nullptr) return DebugLevel::kOff;
  absl::StatusOr<DebugLevel> level = ParseDebugLevel(value);
  if (!level.ok()) {
    Log(LogLevel::kWarning, StrCat(name, ": ", level.status().message(), "; using OFF"));
    return DebugLevel::kOff;
  }
  return *level;
}

std::string_view DebugLevelName(DebugLevel level) {
  switch (level) {
    case DebugLevel::kOff: return "OFF";
    case DebugLevel::kInfo: return "INFO";
    case DebugLevel::kDetail: return "DETAIL";
  }
  return "?";
}

}  // namespace ddpkit::comm
