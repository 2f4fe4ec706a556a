// Any bytes given to the plan-file reader: a file or an InvalidArgument naming the source,
// never a crash or an exception; what it accepts is consistent: each tensor's numel and bytes are
// its shape's, and every DDP index it kept lies among the parameters that require a gradient.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tools/jobs/buckets/plan_file.h"

namespace {

bool InRange(const std::vector<int64_t>& indices, size_t n) {
  for (int64_t i : indices) {
    if (i < 0 || static_cast<size_t>(i) >= n) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<ddpkit::jobs::PlanFile> file = ddpkit::jobs::ParsePlanFile(text, "fuzz");
  if (!file.ok()) {
    if (file.status().code() != absl::StatusCode::kInvalidArgument ||
        file.status().message().substr(0, 6) != "fuzz: ") {
      std::abort();
    }
    return 0;
  }
  if (file->parameters.empty()) std::abort();
  for (const ddpkit::jobs::PlanTensor& t : file->parameters) {
    int64_t numel = 1;
    for (int64_t extent : t.shape) numel *= extent;  // the reader checked it fits
    if (t.numel != numel || t.nbytes < t.numel || t.nbytes > 16 * t.numel) std::abort();
  }
  if (!file->ddp) return 0;
  const size_t n = file->DdpParameters().size();
  const ddpkit::jobs::PyTorchDdpLog& log = *file->ddp;
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
