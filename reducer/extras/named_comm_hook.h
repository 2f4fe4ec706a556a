// The comm hooks a job names on its command line (`--comm-hook NAME`): the built-ins of
// comm_hook.h and PowerSGD's two (powersgd_hook.h).
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "reducer/distributed_data_parallel.h"
#include "reducer/extras/powersgd_hook.h"

namespace ddpkit::reducer {

inline constexpr std::string_view kCommHookChoices =
    "allreduce, fp16, bf16, powersgd or batched_powersgd";

// InvalidArgument naming the choices for an unknown name.
absl::Status ValidateCommHookName(std::string_view name);
bool IsPowerSgdHookName(std::string_view name);

// Registers the named hook on `ddp` (before its first iteration); `powersgd` configures
// PowerSGD's hooks and is validated for them only.
absl::Status RegisterNamedCommHook(DistributedDataParallel& ddp, std::string_view name,
                                   const PowerSgdOptions& powersgd);

}  // namespace ddpkit::reducer
