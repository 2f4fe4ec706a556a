// `--check` and `--reference`: a job's verdicts as an exit status, so a CI script fails
// without parsing a report (join and train take them).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ddpkit::cli {

// The flags, for a subcommand's flag_names.
inline const std::vector<std::string> kCheckFlagNames = {"check", "reference"};

// Whether --check was given.
bool CheckRequested();
// Whether --reference one-process was given; InvalidArgument for any other value.
absl::StatusOr<bool> ReferenceOneProcessFromFlags();

// One thing a run can be checked for, and how it came out: `what` says it as a finding,
// "the final models are identical on every rank" or "rank 2's final model differs".
struct Verdict {
  bool passed = true;
  std::string what;
};

// Each failed verdict as one line on stderr, "ddpkit <command> --check: FAILED: <what>", and
// kExitCheckFailed; when all passed, one line listing them and kExitOk. Stdout is left alone
// (a --json report stays pure JSON).
int ReportVerdicts(std::string_view command, const std::vector<Verdict>& verdicts);

}  // namespace ddpkit::cli
