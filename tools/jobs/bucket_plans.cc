#include "tools/jobs/bucket_plans.h"

#include "autograd/ops.h"
#include "autograd/random.h"
#include "comm/threads/threads_world.h"
#include "tools/jobs/dataset.h"
#include "tools/jobs/training.h"

namespace ddpkit::jobs {
namespace {

// The assignment a logged plan describes.
reducer::BucketAssignment AssignmentOf(
    const google::protobuf::RepeatedPtrField<reducer::BucketInfo>& buckets) {
  reducer::BucketAssignment assignment;
  for (const reducer::BucketInfo& b : buckets) {
    assignment.buckets.emplace_back(b.param_indices().begin(), b.param_indices().end());
    assignment.limits.push_back(static_cast<size_t>(b.limit_bytes()));
  }
  return assignment;
}

}  // namespace

BucketPlan PlanOf(const reducer::BucketAssignment& assignment) {
  BucketPlan plan;
  for (size_t b = 0; b < assignment.buckets.size(); ++b) {
    google::protobuf::ListValue& indices = *plan.add_buckets();
    for (size_t index : assignment.buckets[b]) {
      indices.add_values()->set_number_value(static_cast<double>(index));
    }
    plan.add_limits(static_cast<double>(assignment.limits[b]));
  }
  return plan;
}

google::protobuf::RepeatedPtrField<reducer::BucketInfo> DescribeBuckets(
    const reducer::BucketAssignment& assignment,
    const std::vector<reducer::BucketTensorSpec>& specs, const std::vector<std::string>& names) {
  google::protobuf::RepeatedPtrField<reducer::BucketInfo> infos;
  for (size_t b = 0; b < assignment.buckets.size(); ++b) {
    reducer::BucketInfo& info = *infos.Add();
    int64_t bytes = 0;
    for (size_t index : assignment.buckets[b]) {
      info.add_param_indices(static_cast<int32_t>(index));
      if (!names.empty()) info.add_param_names(names[index]);
      bytes += static_cast<int64_t>(specs[index].nbytes());
    }
    info.set_bytes(bytes);
    info.set_limit_bytes(static_cast<int64_t>(assignment.limits[b]));
    info.set_dtype(std::string(DTypeName(specs[assignment.buckets[b][0]].dtype)));
  }
  return infos;
}

absl::StatusOr<ModelBuckets> ModelBucketPlans(const std::string& model,
                                              const reducer::DdpOptions& options) {
  DDPKIT_ASSIGN_OR_RETURN(const models::ModelSpec spec, models::ParseModel(model));
  reducer::DdpLoggingData log;
  DDPKIT_RETURN_IF_ERROR(comm::RunThreadsWorld(1, [&](comm::ProcessGroup& group) -> absl::Status {
    DDPKIT_ASSIGN_OR_RETURN(auto ddp, reducer::DistributedDataParallel::Create(
                                          models::MakeModel(spec, 0), group, options));
    // Two rows of the model's input (random; token ids 0) and labels 0: the plan depends on
    // the graph, not on the values.
    Tensor x = BatchInput(spec.io, 2);
    if (IsFloatingPoint(x.dtype())) Generator(0).FillNormal(x);
    Tensor y = BatchLabels(spec.io, 2);
    // The rebuild follows the first synced iteration (static graph: the second).
    for (int i = 0; i < 2 + (options.static_graph ? 1 : 0); ++i) {
      ddp->SetForwardContext({.rank = 0, .iteration = i});  // a branch= model's control flow
      TrainingLoss("ce", ddp->Forward(x), y).Backward();
    }
    log = ddp->LoggingData();
    return absl::OkStatus();
  }));
  ModelBuckets report;
  report.set_model(model);
  *report.mutable_initial() = PlanOf(AssignmentOf(log.initial_buckets()));
  *report.mutable_rebuilt() = PlanOf(AssignmentOf(log.rebuilt_buckets()));
  *report.mutable_grad_ready_order() = log.prev_iteration_grad_ready_order_indices();
  *report.mutable_initial_buckets() = log.initial_buckets();
  *report.mutable_rebuilt_buckets() = log.rebuilt_buckets();
  report.set_total_parameter_bytes(log.total_parameter_size_bytes());
  report.set_first_bucket_bytes(log.first_bucket_bytes());
  report.set_bucket_cap_bytes(log.bucket_cap_bytes());
  const reducer::BucketCaps caps = reducer::BucketCapsOf(options);
  for (size_t cap : caps.rebuild.per_bucket) {
    report.add_per_bucket_cap_bytes(static_cast<int64_t>(cap));
  }
  report.set_size_limited_initial_plan(caps.initial.front() != reducer::kNoBucketSizeLimit);
  report.set_pytorch_rules(reducer::RulesFollowed(options.pytorch_version));
  return report;
}

}  // namespace ddpkit::jobs
