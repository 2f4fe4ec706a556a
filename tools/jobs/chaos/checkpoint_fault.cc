#include "tools/jobs/chaos/checkpoint_fault.h"

#include <algorithm>
#include <filesystem>
#include <regex>

#include "absl/strings/numbers.h"
#include "autograd/base/error.h"
#include "tools/checkpoint/checkpoint.h"

namespace ddpkit::jobs {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> FolderNames(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    names.push_back(entry.path().filename().string());
  }
  return names;
}

// "resumed from step N" of every rank of every restarted run; the least of them (-1: none).
int64_t LeastResumedStep(const std::vector<std::string>& lines) {
  static const std::regex resumed("resumed from step ([0-9]+)");
  int64_t least = -1;
  for (const std::string& line : lines) {
    std::smatch match;
    int64_t step = 0;
    if (!std::regex_search(line, match, resumed) || !absl::SimpleAtoi(match[1].str(), &step)) {
      continue;
    }
    least = least < 0 ? step : std::min(least, step);
  }
  return least;
}

// "" when every committed checkpoint verifies and nothing was moved aside as damaged.
std::string DamagedCheckpoints(const std::string& dir, int& verified) {
  std::string problems;
  for (const std::string& name : FolderNames(dir)) {
    if (name.starts_with("damaged-")) StrAppend(&problems, name, " was moved aside as damaged; ");
    if (!checkpoint::StepOfCheckpointFolder(name)) continue;
    absl::StatusOr<checkpoint::CheckpointManifest> checked =
        checkpoint::VerifyCheckpoint(StrCat(dir, "/", name));
    if (checked.ok()) {
      ++verified;
    } else {
      StrAppend(&problems, name, ": ", checked.status().message(), "; ");
    }
  }
  return problems;
}

}  // namespace

int64_t NewestCommittedStep(const std::string& dir) {
  int64_t newest = -1;
  for (const std::string& name : FolderNames(dir)) {
    newest = std::max(newest, checkpoint::StepOfCheckpointFolder(name).value_or(-1));
  }
  return newest;
}

std::optional<std::string> WaitForCheckpointInFlight(const std::string& dir, absl::Time deadline) {
  while (absl::Now() < deadline) {
    for (const std::string& name : FolderNames(dir)) {
      if (name.starts_with(".tmp-step-") && !name.ends_with(".replaced")) return name;
    }
    absl::SleepFor(absl::Microseconds(200));
  }
  return std::nullopt;
}

void JudgeCheckpoints(const std::string& dir, const std::vector<std::string>& lines,
                      int64_t committed_at_fault, ChaosTrial& row) {
  int verified = 0;
  const std::string damaged = DamagedCheckpoints(dir, verified);
  row.set_committed_at_fault(committed_at_fault);
  row.set_resumed_from_step(LeastResumedStep(lines));
  row.set_checkpoints_verified(verified);
  std::string problem = damaged;
  if (row.restarts() > 0 && row.resumed_from_step() < committed_at_fault) {
    StrAppend(&problem, "a restarted run resumed from step ", row.resumed_from_step(),
              ", older than step ", committed_at_fault, " committed before the fault; ");
  }
  if (!problem.empty()) {
    row.set_clear_error(false);
    row.set_diagnosis(StrCat("checkpoints: ", problem, row.diagnosis()));
    return;
  }
  row.set_diagnosis(StrCat(
      row.diagnosis(), "; checkpoints: the fault came ",
      row.checkpoint_in_flight().empty() ? "between two (none in flight)"
                                         : StrCat("while writing ", row.checkpoint_in_flight()),
      ", step ", committed_at_fault, " committed before it, resumed from step ",
      row.resumed_from_step(), ", ", verified, " committed checkpoint(s) left, all intact"));
}

}  // namespace ddpkit::jobs
