#include "tools/cli/check_verdict.h"

#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/cli/subcommand.h"

ABSL_FLAG(bool, check, false,
          "exit 3 with one line per failed verdict (the ranks' final models differ; with "
          "--reference, DDP differs from one process) instead of 0 (docs/join.md, In CI)");
ABSL_FLAG(std::string, reference, "",
          "one-process: also train one process on the union of the ranks' rows and compare its "
          "final model with DDP's");

namespace ddpkit::cli {

bool CheckRequested() { return absl::GetFlag(FLAGS_check); }

absl::StatusOr<bool> ReferenceOneProcessFromFlags() {
  const std::string reference = absl::GetFlag(FLAGS_reference);
  if (!reference.empty() && reference != "one-process") {
    return absl::InvalidArgumentError(
        absl::StrCat("--reference: '", reference, "' is not a reference (expected one-process)"));
  }
  return !reference.empty();
}

int ReportVerdicts(std::string_view command, const std::vector<Verdict>& verdicts) {
  std::vector<std::string> passed;
  bool failed = false;
  for (const Verdict& v : verdicts) {
    if (v.passed) {
      passed.push_back(v.what);
    } else {
      std::cerr << "ddpkit " << command << " --check: FAILED: " << v.what << "\n";
      failed = true;
    }
  }
  if (failed) return kExitCheckFailed;
  std::cerr << "ddpkit " << command << " --check: passed: " << absl::StrJoin(passed, "; ") << "\n";
  return kExitOk;
}

}  // namespace ddpkit::cli
