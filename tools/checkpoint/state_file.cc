#include "tools/checkpoint/state_file.h"

#include <algorithm>
#include <limits>
#include <type_traits>

#include "absl/strings/str_format.h"
#include "autograd/base/error.h"
#include "nlohmann/json.hpp"

namespace ddpkit::checkpoint {
namespace {

using Json = nlohmann::ordered_json;

// Nothing random advances while the trainer runs: the initial weights and the synthetic data
// are drawn once from --seed, which is a checked setting. A generator that did advance (say,
// dropout's) would be saved here.
constexpr char kRngNote[] =
    "no generator advances during training; the initial weights and synthetic data derive "
    "from --seed";

absl::Status Bad(std::string_view what) {
  return absl::DataLossError(StrCat(kStateFileName, ": ", what));
}

template <typename T>
absl::StatusOr<T> Field(const Json& doc, const char* key) {
  const auto it = doc.find(key);
  if (it == doc.end()) return Bad(StrCat("no \"", key, "\""));
  if constexpr (std::is_same_v<T, bool>) {
    if (it->is_boolean()) return it->get<bool>();
  } else {
    // In T's range: a world size of 2^31 must not read back as a negative int.
    const int64_t value = it->is_number_integer() ? it->get<int64_t>() : -1;
    if (value >= 0 && value <= static_cast<int64_t>(std::numeric_limits<T>::max())) {
      return static_cast<T>(value);
    }
  }
  return Bad(StrCat("\"", key, "\" has the wrong type"));
}

// A JSON array of non-negative integers.
absl::StatusOr<std::vector<size_t>> Sizes(const Json& array, std::string_view what) {
  if (!array.is_array()) return Bad(StrCat(what, " is not an array"));
  std::vector<size_t> sizes;
  for (const Json& value : array) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0) {
      return Bad(StrCat(what, " holds something other than a non-negative integer"));
    }
    sizes.push_back(static_cast<size_t>(value.get<int64_t>()));
  }
  return sizes;
}

// "ddp_buckets": {"per_bucket_param_indices": [[5, 4], [3, 2, 1, 0]], "limits": [...]}, in
// PyTorch's names. Only its shape is checked here; whether it fits the model is the reducer's.
absl::StatusOr<std::optional<BucketPlan>> ParseBucketPlan(const Json& doc) {
  const auto it = doc.find("ddp_buckets");
  if (it == doc.end()) return std::nullopt;  // written before the plan was kept, or not rebuilt
  if (!it->is_object()) return Bad("\"ddp_buckets\" is not an object");
  const auto buckets = it->find("per_bucket_param_indices");
  if (buckets == it->end() || !buckets->is_array()) {
    return Bad("\"ddp_buckets\" has no \"per_bucket_param_indices\" array");
  }
  BucketPlan plan;
  for (const Json& bucket : *buckets) {
    DDPKIT_ASSIGN_OR_RETURN(std::vector<size_t> indices,
                            Sizes(bucket, "a bucket of \"per_bucket_param_indices\""));
    plan.buckets.push_back(std::move(indices));
  }
  const auto limits = it->find("limits");
  if (limits == it->end()) return Bad("\"ddp_buckets\" has no \"limits\"");
  DDPKIT_ASSIGN_OR_RETURN(plan.limits, Sizes(*limits, "\"ddp_buckets\" \"limits\""));
  return plan;
}

// "ddp_static_graph": {"num_grad_hooks_triggered": [1, 1, 0], "globally_unused_param_indices":
// [2]} (PyTorch's numGradHooksTriggeredMap_). Only its shape is checked here, as the plan's.
absl::StatusOr<std::optional<StaticGraphRecord>> ParseStaticGraph(const Json& doc) {
  const auto it = doc.find("ddp_static_graph");
  if (it == doc.end()) return std::nullopt;  // not static graph, or before its record was kept
  if (!it->is_object()) return Bad("\"ddp_static_graph\" is not an object");
  StaticGraphRecord record;
  const auto counts = it->find("num_grad_hooks_triggered");
  if (counts == it->end()) return Bad("\"ddp_static_graph\" has no \"num_grad_hooks_triggered\"");
  DDPKIT_ASSIGN_OR_RETURN(record.hook_counts,
                          Sizes(*counts, "\"ddp_static_graph\" \"num_grad_hooks_triggered\""));
  const auto unused = it->find("globally_unused_param_indices");
  if (unused == it->end()) {
    return Bad("\"ddp_static_graph\" has no \"globally_unused_param_indices\"");
  }
  DDPKIT_ASSIGN_OR_RETURN(record.globally_unused,
                          Sizes(*unused, "\"ddp_static_graph\" \"globally_unused_param_indices\""));
  return record;
}

}  // namespace

std::string SerializeCheckpointState(const CheckpointState& state) {
  Json settings = Json::object();
  for (const auto& [flag, value] : state.settings) settings[flag] = value;
  Json doc = {{"step", state.position.step},
              {"next_micro_batch", state.position.next_micro_batch},
              {"world_size", state.world_size},
              {"sharded_optimizer", state.sharded_optimizer},
              {"rng", kRngNote},
              {"settings", settings}};
  if (state.bucket_plan) {
    doc["ddp_buckets"] = {{"per_bucket_param_indices", state.bucket_plan->buckets},
                          {"limits", state.bucket_plan->limits}};
  }
  if (state.static_graph) {
    doc["ddp_static_graph"] = {
        {"num_grad_hooks_triggered", state.static_graph->hook_counts},
        {"globally_unused_param_indices", state.static_graph->globally_unused}};
  }
  return doc.dump(2) + "\n";
}

absl::StatusOr<CheckpointState> ParseCheckpointState(std::string_view bytes) {
  const Json doc = Json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return Bad("not a JSON object");
  CheckpointState state;
  DDPKIT_ASSIGN_OR_RETURN(state.position.step, Field<int64_t>(doc, "step"));
  DDPKIT_ASSIGN_OR_RETURN(state.position.next_micro_batch, Field<int64_t>(doc, "next_micro_batch"));
  DDPKIT_ASSIGN_OR_RETURN(state.world_size, Field<int>(doc, "world_size"));
  DDPKIT_ASSIGN_OR_RETURN(state.sharded_optimizer, Field<bool>(doc, "sharded_optimizer"));
  const auto settings = doc.find("settings");
  if (settings == doc.end() || !settings->is_object()) return Bad("\"settings\" is not an object");
  for (const auto& [flag, value] : settings->items()) {
    if (!value.is_string()) return Bad(StrCat("setting ", flag, " is not a string"));
    state.settings.emplace_back(flag, value.get<std::string>());
  }
  DDPKIT_ASSIGN_OR_RETURN(state.bucket_plan, ParseBucketPlan(doc));
  DDPKIT_ASSIGN_OR_RETURN(state.static_graph, ParseStaticGraph(doc));
  return state;
}

std::string OptimizerFileName(bool sharded, int rank) {
  return sharded ? absl::StrFormat("optimizer.rank-%05d.safetensors", rank)
                 : std::string("optimizer.safetensors");
}

std::vector<std::string> RequiredCheckpointFiles(const CheckpointState& state) {
  std::vector<std::string> names = {kStateFileName, kModelFileName};
  for (int r = 0; r < (state.sharded_optimizer ? state.world_size : 1); ++r) {
    names.push_back(OptimizerFileName(state.sharded_optimizer, r));
  }
  return names;
}

absl::Status CheckSameSettings(const CheckpointSettings& theirs, const CheckpointSettings& ours,
                               const std::string& path) {
  for (const auto& setting : ours) {  // no structured binding: clang 14 cannot capture one
    const std::string& flag = setting.first;
    const std::string& value = setting.second;
    const auto it = std::find_if(theirs.begin(), theirs.end(),
                                 [&](const auto& recorded) { return recorded.first == flag; });
    const std::string was = it == theirs.end() ? "(not recorded)" : it->second;
    if (was == value) continue;
    return absl::FailedPreconditionError(
        StrCat("cannot resume from ", path, ": it was written with ", flag, " ", was,
               " but this run has ", flag, " ", value, "; rerun with ", flag, " ", was,
               ", or use another --checkpoint-dir to start over"));
  }
  return absl::OkStatus();
}

}  // namespace ddpkit::checkpoint
