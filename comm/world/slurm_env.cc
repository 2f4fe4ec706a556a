#include "comm/world/slurm_env.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "autograd/base/error.h"

namespace ddpkit::comm {
namespace {

const char* Get(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

}  // namespace

std::string FirstHostOfNodelist(std::string_view nodelist) {
  // The first entry ends at a comma outside brackets.
  size_t end = 0;
  for (int depth = 0; end < nodelist.size(); ++end) {
    if (nodelist[end] == '[') ++depth;
    if (nodelist[end] == ']') --depth;
    if (nodelist[end] == ',' && depth == 0) break;
  }
  const std::string_view first = nodelist.substr(0, end);
  const size_t open = first.find('[');
  if (open == std::string_view::npos) return std::string(first);
  // prefix[range,...]suffix: the first number of the first range, zero padding kept.
  const std::string_view inside = first.substr(open + 1, first.find(']') - open - 1);
  const std::string_view range = inside.substr(0, inside.find(','));
  const std::string_view low = range.substr(0, range.find('-'));
  const size_t close = first.find(']');
  const std::string_view suffix =
      close == std::string_view::npos ? std::string_view() : first.substr(close + 1);
  return StrCat(first.substr(0, open), low, suffix);
}

int TasksOnNode(std::string_view tasks_per_node, int node_id) {
  int node = 0;
  for (absl::string_view entry :
       absl::StrSplit(absl::string_view(tasks_per_node.data(), tasks_per_node.size()), ',')) {
    int tasks = 0, repeat = 1;
    const size_t paren = entry.find('(');
    if (!absl::SimpleAtoi(entry.substr(0, paren), &tasks)) return 0;
    if (paren != absl::string_view::npos) {  // "4(x2)"
      absl::string_view times = entry.substr(paren + 1);
      if (times.size() < 3 || times[0] != 'x' || times.back() != ')' ||
          !absl::SimpleAtoi(times.substr(1, times.size() - 2), &repeat)) {
        return 0;
      }
    }
    if (node_id < node + repeat) return tasks;
    node += repeat;
  }
  return 0;
}

std::map<std::string, std::string> TorchrunVariablesFromSlurm() {
  std::map<std::string, std::string> vars;
  const char* procid = Get("SLURM_PROCID");
  if (procid == nullptr) return vars;
  vars["RANK"] = procid;
  if (const char* v = Get("SLURM_NTASKS")) vars["WORLD_SIZE"] = v;
  if (const char* v = Get("SLURM_LOCALID")) vars["LOCAL_RANK"] = v;
  int node_id = 0;
  if (const char* tasks = Get("SLURM_TASKS_PER_NODE");
      tasks != nullptr &&
      absl::SimpleAtoi(Get("SLURM_NODEID") ? Get("SLURM_NODEID") : "0", &node_id)) {
    if (const int here = TasksOnNode(tasks, node_id); here > 0) {
      vars["LOCAL_WORLD_SIZE"] = std::to_string(here);
    }
  }
  const char* nodelist = Get("SLURM_STEP_NODELIST");
  if (nodelist == nullptr) nodelist = Get("SLURM_JOB_NODELIST");
  if (nodelist != nullptr) vars["MASTER_ADDR"] = FirstHostOfNodelist(nodelist);
  int64_t job = 0;
  if (const char* v = Get("SLURM_JOB_ID"); v != nullptr && absl::SimpleAtoi(v, &job)) {
    vars["MASTER_PORT"] = std::to_string(20000 + job % 20000);
  }
  return vars;
}

}  // namespace ddpkit::comm
