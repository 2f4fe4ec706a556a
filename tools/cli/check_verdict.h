// `--check` and `--reference`: a job's verdicts as an exit status, so a CI script fails
// without parsing a report (join and train take them).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"

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

// The verdicts of a report with `models_identical` and the reference fields (join's and
// train's): the models, and with --reference the one process, which trained on `rows`.
template <typename Report>
std::vector<Verdict> ModelVerdicts(const Report& r, std::string_view rows) {
  std::vector<Verdict> verdicts = {
      {r.models_identical(), r.models_identical() ? "the final models are identical on every rank"
                                                  : "the ranks' final models differ"}};
  if (!r.reference().empty()) {
    verdicts.push_back(
        {r.reference_agrees(),
         absl::StrFormat("%s one process on %s: largest difference %.3g in %s, bound %.3g",
                         r.reference_agrees() ? "DDP equals" : "DDP differs from", rows,
                         r.reference_max_abs_diff(), r.reference_worst_parameter(),
                         r.reference_tolerance())});
  }
  return verdicts;
}

// Each failed verdict as one line on stderr, "ddpkit <command> --check: FAILED: <what>", and
// kExitCheckFailed; when all passed, one line listing them and kExitOk. Stdout is left alone
// (a --json report stays pure JSON).
int ReportVerdicts(std::string_view command, const std::vector<Verdict>& verdicts);

}  // namespace ddpkit::cli
