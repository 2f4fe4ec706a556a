#include "tools/trace/merge.h"

#include <filesystem>
#include <set>
#include <stdexcept>

#include "absl/strings/str_join.h"
#include "autograd/base/error.h"
#include "autograd/base/file_util.h"
#include "nlohmann/json.hpp"
#include "tools/trace/parse_trace.h"
#include "tools/trace/session.h"

namespace ddpkit::trace {

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

namespace {

// Adds one rank file's events and rank records to `merged` (the first file also gives it its
// job, world size and metadata). InvalidArgument, naming the file, when it does not belong.
absl::Status MergeOne(const std::string& path, json& merged, std::set<int>& ranks) {
  DDPKIT_ASSIGN_OR_RETURN(json part, ReadTraceJson(path));
  try {
    const json& info = part.at("otherData").at("ddpkit");
    if (merged.is_null()) {
      if (!info.at("world_size").is_number_integer()) throw std::invalid_argument("world_size");
      merged = part;
      merged.erase("distributedInfo");  // HTA's per-rank block; a merged file holds every rank
      merged["traceEvents"] = json::array();
      merged["otherData"]["ddpkit"]["ranks"] = json::array();
    } else if (const json& job = merged["otherData"]["ddpkit"];
               info.at("job_id") != job["job_id"] || info.at("world_size") != job["world_size"]) {
      return absl::InvalidArgumentError(
          StrCat(path, " belongs to another job (job id ", info["job_id"].dump(), ", world size ",
                 info["world_size"].dump(), "; not ", job["job_id"].dump(), ", ",
                 job["world_size"].dump(), ")"));
    }
    for (const json& rank : info.at("ranks")) {
      const int r = rank.at("rank").get<int>();
      if (!ranks.insert(r).second) {
        return absl::InvalidArgumentError(StrCat(path, " holds rank ", r, " a second time"));
      }
      merged["otherData"]["ddpkit"]["ranks"].push_back(rank);
    }
    for (json& e : part.at("traceEvents")) merged["traceEvents"].push_back(std::move(e));
  } catch (const std::exception& e) {  // a field missing or of the wrong type
    return absl::InvalidArgumentError(StrCat(path, ": not a ddpkit rank trace (", e.what(),
                                             "); merge the FILE.rank<r>.json "
                                             "files `ddpkit ... --trace FILE` wrote"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int> MergeTraceFiles(const std::vector<std::string>& inputs,
                                    const std::string& output) {
  if (inputs.empty()) return absl::InvalidArgumentError("no trace files to merge");
  json merged;
  std::set<int> ranks;
  for (const std::string& path : inputs) DDPKIT_RETURN_IF_ERROR(MergeOne(path, merged, ranks));
  const int world = merged["otherData"]["ddpkit"]["world_size"].get<int>();  // checked in MergeOne
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

}  // namespace ddpkit::trace
