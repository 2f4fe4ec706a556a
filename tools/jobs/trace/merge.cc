#include "tools/jobs/trace/merge.h"

#include <filesystem>
#include <set>

#include "absl/strings/str_join.h"
#include "autograd/error.h"
#include "autograd/file_util.h"
#include "nlohmann/json.hpp"
#include "tools/jobs/trace/session.h"
#include "tools/jobs/trace/trace_file.h"

namespace ddpkit::jobs {

using nlohmann::json;

std::vector<std::string> RankFilesOf(const std::string& base) {
  std::vector<std::string> files;
  for (int r = 0;; ++r) {
    const std::string path = TraceSession::RankPath(base, r);
    if (!std::filesystem::exists(path)) break;
    files.push_back(path);
  }
  return files;
}

absl::StatusOr<int> MergeTraceFiles(const std::vector<std::string>& inputs,
                                    const std::string& output) {
  if (inputs.empty()) return absl::InvalidArgumentError("no trace files to merge");
  json merged;
  std::set<int> ranks;
  for (const std::string& path : inputs) {
    DDPKIT_ASSIGN_OR_RETURN(json part, ReadTraceJson(path));
    json& info = part["otherData"]["ddpkit"];
    if (merged.is_null()) {
      merged = part;
      merged.erase("distributedInfo");  // HTA's per-rank block; a merged file holds every rank
      merged["traceEvents"] = json::array();
      merged["otherData"]["ddpkit"]["ranks"] = json::array();
    } else if (info["job_id"] != merged["otherData"]["ddpkit"]["job_id"]) {
      return absl::InvalidArgumentError(
          StrCat(path, " belongs to another job (job id ", info["job_id"].get<std::string>(),
                 ", not ", merged["otherData"]["ddpkit"]["job_id"].get<std::string>(), ")"));
    }
    for (const json& rank : info["ranks"]) {
      const int r = rank["rank"].get<int>();
      if (!ranks.insert(r).second) {
        return absl::InvalidArgumentError(StrCat(path, " holds rank ", r, " a second time"));
      }
      merged["otherData"]["ddpkit"]["ranks"].push_back(rank);
    }
    for (json& e : part["traceEvents"]) merged["traceEvents"].push_back(std::move(e));
  }
  const int world = merged["otherData"]["ddpkit"]["world_size"].get<int>();
  std::vector<int> missing;
  for (int r = 0; r < world; ++r) {
    if (!ranks.count(r)) missing.push_back(r);
  }
  if (!missing.empty()) {
    return absl::InvalidArgumentError(StrCat("the job had ", world, " ranks but no file holds rank",
                                             missing.size() > 1 ? "s " : " ",
                                             absl::StrJoin(missing, ", ")));
  }
  DDPKIT_RETURN_IF_ERROR(WriteFileAtomically(output, merged.dump() + "\n"));
  return static_cast<int>(ranks.size());
}

}  // namespace ddpkit::jobs
