// `ddpkit buckets --params FILE`: DDP's plans for a plan file's parameters, from DDP's rules
// alone (no model runs), and whether they are the ones PyTorch's DDP logged in the file.
#include <algorithm>
#include <numeric>

#include "absl/strings/str_join.h"
#include "tools/jobs/bucket_plans.h"

namespace ddpkit::jobs {

using torch_formats::PlanFile;
using torch_formats::PlanTensor;
using torch_formats::PyTorchDdpLog;
namespace {

using Infos = google::protobuf::RepeatedPtrField<reducer::BucketInfo>;

// DDP's parameters (those requiring a gradient) as the assignment sees them, with their names;
// the others are listed in the report as skipped.
absl::StatusOr<std::vector<reducer::BucketTensorSpec>> DdpSpecs(const PlanFile& file,
                                                                std::vector<std::string>& names,
                                                                ModelBuckets& report) {
  std::vector<reducer::BucketTensorSpec> specs;
  for (const PlanTensor& p : file.parameters) {
    if (!p.requires_grad) {
      report.add_skipped_parameters(p.name);
      continue;
    }
    absl::StatusOr<DType> dtype = ParseDType(p.dtype);
    if (!dtype.ok() || !IsFloatingPoint(*dtype)) {
      return absl::InvalidArgumentError(
          StrCat("parameter ", p.name, " requires a gradient but is ", p.dtype,
                 "; ddpkit's buckets hold float32, float64, float16 and bfloat16"));
    }
    specs.push_back({p.numel, *dtype});
    names.push_back(p.name);
  }
  if (specs.empty()) {
    return absl::InvalidArgumentError(
        "no parameter requires a gradient: DDP has nothing to reduce");
  }
  return specs;
}

// The arrival order the rebuild walks: the file's, else reverse registration order.
std::vector<size_t> RebuildOrder(const PlanFile& file, size_t n, bool& estimated) {
  estimated = !file.ddp || file.ddp->prev_iteration_grad_ready_order_indices.empty();
  std::vector<size_t> order(n);
  if (estimated) {
    std::iota(order.rbegin(), order.rend(), size_t{0});
    return order;
  }
  const std::vector<int64_t>& logged = file.ddp->prev_iteration_grad_ready_order_indices;
  return std::vector<size_t>(logged.begin(), logged.end());
}

// The first place where ddpkit's buckets and PyTorch's (sizes, and indices when given) differ;
// empty when they agree.
std::string FirstDifference(std::string_view plan, const Infos& ours,
                            const std::vector<int64_t>& sizes,
                            const std::vector<std::vector<int64_t>>& indices) {
  if (static_cast<size_t>(ours.size()) != sizes.size()) {
    return StrCat(plan, ": ddpkit has ", ours.size(), " buckets, PyTorch ", sizes.size());
  }
  for (int b = 0; b < ours.size(); ++b) {
    const std::vector<int64_t> mine(ours[b].param_indices().begin(), ours[b].param_indices().end());
    if (!indices.empty() && mine != indices[b]) {
      return StrCat(plan, ", bucket ", b, ": ddpkit's holds parameters [",
                    absl::StrJoin(mine, ", "), "], PyTorch's [", absl::StrJoin(indices[b], ", "),
                    "]");
    }
    if (ours[b].bytes() != sizes[b]) {
      return StrCat(plan, ", bucket ", b, ": ddpkit's holds ", ours[b].bytes(),
                    " bytes, PyTorch's ", sizes[b]);
    }
  }
  return "";
}

// Whether the two plans hold the same buckets, in another order.
bool SameBucketsInAnotherOrder(const Infos& ours, std::vector<std::vector<int64_t>> pytorchs) {
  std::vector<std::vector<int64_t>> mine;
  for (const reducer::BucketInfo& info : ours) {
    mine.emplace_back(info.param_indices().begin(), info.param_indices().end());
  }
  if (mine == pytorchs) return false;  // the same order: the difference lies elsewhere
  std::sort(mine.begin(), mine.end());
  std::sort(pytorchs.begin(), pytorchs.end());
  return mine == pytorchs;
}

PyTorchAgreement CompareWithPyTorch(const PlanFile& file, const ModelBuckets& report,
                                    const reducer::DdpOptions& options) {
  PyTorchAgreement agreement;
  if (!file.ddp) {
    agreement.set_not_compared("the file holds no DDP run (exported without --input-shape)");
    return agreement;
  }
  const PyTorchDdpLog& log = *file.ddp;
  const reducer::BucketLimits limits = reducer::LimitsOf(options);
  if (file.rules_version && *file.rules_version != options.pytorch_version) {
    agreement.set_not_compared(StrCat("the file was recorded with PyTorch ", file.torch_version,
                                      ", and these plans follow ",
                                      reducer::RulesFollowed(options.pytorch_version),
                                      " (--pytorch-version): drop the flag to compare"));
    return agreement;
  }
  if (log.find_unused_parameters != options.find_unused_parameters ||
      log.static_graph != options.static_graph ||
      static_cast<size_t>(log.first_bucket_bytes) != limits.first_bucket_bytes ||
      static_cast<size_t>(log.bucket_cap_bytes) != limits.bucket_cap_bytes) {
    agreement.set_not_compared(StrCat("PyTorch ran with other options (first bucket ",
                                      log.first_bucket_bytes, " bytes, cap ", log.bucket_cap_bytes,
                                      " bytes, find_unused_parameters ", log.find_unused_parameters,
                                      ", static_graph ", log.static_graph, ")"));
    return agreement;
  }
  agreement.set_compared(true);
  std::string difference = FirstDifference("initial plan", report.initial_buckets(),
                                           log.bucket_sizes, log.initial_per_bucket_param_indices);
  if (difference.empty() && log.has_rebuilt_buckets != !report.rebuilt_buckets().empty()) {
    difference = StrCat("rebuilt plan: ", log.has_rebuilt_buckets ? "PyTorch" : "ddpkit",
                        " rebuilt its buckets, the other did not");
  }
  if (difference.empty() && log.has_rebuilt_buckets) {
    difference = FirstDifference("rebuilt plan", report.rebuilt_buckets(), log.rebuilt_bucket_sizes,
                                 log.rebuilt_per_bucket_param_indices);
    if (!difference.empty() &&
        SameBucketsInAnotherOrder(report.rebuilt_buckets(), log.rebuilt_per_bucket_param_indices)) {
      // PyTorch emits the buckets left open at the end of the walk (one per dtype) in its hash
      // map's iteration order; ddpkit in order of first appearance.
      StrAppend(&difference,
                " (the same buckets in another order: the leftover buckets of several dtypes, "
                "which PyTorch orders by a hash map's iteration)");
    }
  }
  agreement.set_agrees(difference.empty());
  agreement.set_first_difference(difference);
  return agreement;
}

// The rebuilt plan under `limits`, walking `order`; InvalidArgument naming the file's order
// when it is not a permutation of DDP's parameters.
absl::StatusOr<reducer::BucketAssignment> Rebuilt(
    const std::vector<reducer::BucketTensorSpec>& specs, const std::vector<size_t>& order,
    std::vector<size_t> limits) {
  absl::StatusOr<reducer::BucketAssignment> rebuilt =
      reducer::ComputeBucketAssignmentBySize(specs, limits, {}, order);
  if (!rebuilt.ok()) {
    return absl::InvalidArgumentError(
        StrCat("ddp.prev_iteration_grad_ready_order_indices: ", rebuilt.status().message()));
  }
  return rebuilt;
}

}  // namespace

reducer::DdpOptions RecordedDdpOptions(const PlanFile& file) {
  reducer::DdpOptions options;
  if (file.rules_version) options.pytorch_version = *file.rules_version;
  if (!file.ddp) return options;
  const PyTorchDdpLog& log = *file.ddp;
  options.bucket_cap_mb = log.bucket_cap_mb;
  options.bucket_cap_mb_list = log.bucket_cap_mb_list;
  // The first bucket's cap is the file's own unless it follows from a given cap (2.4's rule).
  const bool first_from_cap =
      Follows(options.pytorch_version, reducer::DdpRule::kGivenCapCapsFirstBucket) &&
      (log.bucket_cap_mb || !log.bucket_cap_mb_list.empty());
  if (!first_from_cap) {
    options.first_bucket_mb = static_cast<double>(log.first_bucket_bytes) / (1024.0 * 1024.0);
  }
  options.find_unused_parameters = log.find_unused_parameters;
  options.static_graph = log.static_graph;
  return options;
}

absl::StatusOr<ModelBuckets> PlanFileBucketPlans(const PlanFile& file,
                                                 const reducer::DdpOptions& options) {
  ModelBuckets report;
  report.set_model(file.model);
  std::vector<std::string> names;
  DDPKIT_ASSIGN_OR_RETURN(const std::vector<reducer::BucketTensorSpec> specs,
                          DdpSpecs(file, names, report));
  const reducer::BucketAssignment initial = reducer::InitialBucketAssignment(specs, options);
  *report.mutable_initial() = PlanOf(initial);
  *report.mutable_initial_buckets() = DescribeBuckets(initial, specs, names);
  const reducer::BucketCaps caps = reducer::BucketCapsOf(options);
  const reducer::BucketLimits& limits = caps.rebuild;
  report.set_first_bucket_bytes(static_cast<int64_t>(limits.first_bucket_bytes));
  report.set_bucket_cap_bytes(static_cast<int64_t>(limits.bucket_cap_bytes));
  for (size_t cap : limits.per_bucket) report.add_per_bucket_cap_bytes(static_cast<int64_t>(cap));
  report.set_size_limited_initial_plan(caps.initial.front() != reducer::kNoBucketSizeLimit);
  report.set_pytorch_rules(reducer::RulesFollowed(options.pytorch_version));
  int64_t total = 0;
  for (const reducer::BucketTensorSpec& s : specs) total += static_cast<int64_t>(s.nbytes());
  report.set_total_parameter_bytes(total);
  if (!(options.find_unused_parameters && !options.static_graph)) {  // dynamic: never rebuilds
    bool estimated = false;
    const std::vector<size_t> order = RebuildOrder(file, specs.size(), estimated);
    report.set_grad_ready_order_estimated(estimated);
    for (size_t index : order) report.add_grad_ready_order(static_cast<int32_t>(index));
    DDPKIT_ASSIGN_OR_RETURN(const reducer::BucketAssignment rebuilt,
                            Rebuilt(specs, order, limits.Walk()));
    *report.mutable_rebuilt() = PlanOf(rebuilt);
    *report.mutable_rebuilt_buckets() = DescribeBuckets(rebuilt, specs, names);
    DDPKIT_ASSIGN_OR_RETURN(const reducer::BucketAssignment uncapped,
                            Rebuilt(specs, order, {limits.bucket_cap_bytes}));
    *report.mutable_rebuilt_buckets_without_first_bucket_cap() =
        DescribeBuckets(uncapped, specs, names);
  }
  *report.mutable_pytorch() = CompareWithPyTorch(file, report, options);
  return report;
}

}  // namespace ddpkit::jobs
