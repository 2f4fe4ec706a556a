#include "reducer/extras/named_comm_hook.h"

namespace ddpkit::reducer {

absl::Status ValidateCommHookName(std::string_view name) {
  if (IsPowerSgdHookName(name) || ParseBuiltinCommHook(name).ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      StrCat("unknown comm hook '", name, "'; choose ", kCommHookChoices));
}

bool IsPowerSgdHookName(std::string_view name) { return PowerSgdVariantFromName(name).has_value(); }

absl::Status RegisterNamedCommHook(DistributedDataParallel& ddp, std::string_view name,
                                   const PowerSgdOptions& powersgd) {
  if (std::optional<PowerSgdVariant> variant = PowerSgdVariantFromName(name)) {
    return RegisterPowerSgdHook(ddp, *variant, powersgd).status();
  }
  absl::StatusOr<BuiltinCommHook> builtin = ParseBuiltinCommHook(name);
  if (!builtin.ok()) return ValidateCommHookName(name);
  ddp.RegisterBuiltinCommHook(*builtin);
  return absl::OkStatus();
}

}  // namespace ddpkit::reducer
