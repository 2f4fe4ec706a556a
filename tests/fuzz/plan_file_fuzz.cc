// Any bytes given to the plan-file reader: a file or an InvalidArgument naming the source,
// never a crash or an exception; what it accepts is consistent: each tensor's numel and bytes are
// its shape's, every DDP index it kept lies among the parameters that require a gradient, and a
// compiled section it kept is consistent.
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "tools/torch_formats/plan_file.h"

namespace {

bool InRange(const std::vector<int64_t>& indices, size_t n) {
  for (int64_t i : indices) {
    if (i < 0 || static_cast<size_t>(i) >= n) return false;
  }
  return true;
}

// The compiled section the reader kept: parameters among the file's, each user after its node,
// the split a partition of the nodes (so DdpOptimizerSplit may index freely).
bool CompiledSectionIsConsistent(const ddpkit::torch_formats::PlanFile& file) {
  const ddpkit::torch_formats::CompiledDdpRecord& record = *file.compiled;
  const size_t n = record.nodes.size(), p = file.parameters.size();
  auto params_ok = [p](const std::vector<size_t>& v) {
    for (size_t i : v) {
      if (i >= p) return false;
    }
    return true;
  };
  for (size_t i = 0; i < n; ++i) {
    const ddpkit::torch_formats::CompiledNode& node = record.nodes[i];
    if (!params_ok(node.params) || !params_ok(node.module_params) ||
        !params_ok(node.other_params)) {
      return false;
    }
    for (size_t u : node.users) {
      if (u <= i || u >= n) return false;
    }
  }
  std::vector<int> seen(n, 0);
  for (const ddpkit::torch_formats::CompiledSubgraph& s : record.split) {
    if (s.nodes.empty() || !params_ok(s.params)) return false;
    for (size_t i : s.nodes) {
      if (i >= n || seen[i]++) return false;
    }
  }
  for (int count : seen) {
    if (count != 1) return false;
  }
  return record.bucket_bytes_cap >= 1 && record.first_bucket_bytes_cap >= 1;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<ddpkit::torch_formats::PlanFile> file =
      ddpkit::torch_formats::ParsePlanFile(text, "fuzz");
  if (!file.ok()) {
    if (file.status().code() != absl::StatusCode::kInvalidArgument ||
        file.status().message().substr(0, 6) != "fuzz: ") {
      std::abort();
    }
    return 0;
  }
  if (file->parameters.empty()) std::abort();
  for (const ddpkit::torch_formats::PlanTensor& t : file->parameters) {
    int64_t numel = 1;
    for (int64_t extent : t.shape) numel *= extent;  // the reader checked it fits
    if (t.numel != numel || t.nbytes < t.numel || t.nbytes > 16 * t.numel) std::abort();
  }
  if (file->compiled && !CompiledSectionIsConsistent(*file)) std::abort();
  if (!file->ddp) return 0;
  const size_t n = file->DdpParameters().size();
  const ddpkit::torch_formats::PyTorchDdpLog& log = *file->ddp;
  if (!InRange(log.prev_iteration_grad_ready_order_indices, n) ||
      log.rebuilt_per_bucket_param_indices.size() != log.rebuilt_bucket_sizes.size()) {
    std::abort();
  }
  for (const auto& bucket : log.rebuilt_per_bucket_param_indices) {
    if (!InRange(bucket, n)) std::abort();
  }
  for (const auto& bucket : log.initial_per_bucket_param_indices) {
    if (!InRange(bucket, n)) std::abort();
  }
  return 0;
}
