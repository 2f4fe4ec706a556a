#include "reducer/reducer_logging.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_join.h"
#include "autograd/base/log.h"
#include "reducer/reducer.h"

namespace ddpkit::reducer {
namespace {

int64_t Nanos(std::chrono::steady_clock::duration d) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

bool DebugOn(const comm::ProcessGroup& group) {
  return group.options().debug_level != comm::DebugLevel::kOff;
}

// PyTorch's strs_map forms: "336, 1024, 576" and "5 4 3, 2, 1 0".
std::string PyTorchSizes(const google::protobuf::RepeatedPtrField<BucketInfo>& buckets) {
  return absl::StrJoin(buckets, ", ", [](std::string* out, const BucketInfo& b) {
    absl::StrAppend(out, b.bytes());
  });
}

std::string PyTorchIndices(const google::protobuf::RepeatedPtrField<BucketInfo>& buckets) {
  return absl::StrJoin(buckets, ", ", [](std::string* out, const BucketInfo& b) {
    absl::StrAppend(out, absl::StrJoin(b.param_indices(), " "));
  });
}

// PyTorch records runtime stats (and "iteration") at the forwards of sampled iterations:
// Reducer::should_collect_runtime_stats, with kDDPRuntimeLoggingSampleRate = 100.
bool PyTorchSamples(int64_t completed) {
  return completed > 0 && (completed <= 10 || completed % 100 == 0);
}

}  // namespace

std::vector<BucketInfo> BucketInfosOf(const std::vector<Bucket>& buckets,
                                      const NamedTensors& params) {
  std::vector<BucketInfo> infos;
  for (const Bucket& bucket : buckets) {
    BucketInfo& info = infos.emplace_back();
    for (size_t index : bucket.variable_indices) {
      info.add_param_indices(static_cast<int32_t>(index));
      info.add_param_names(params[index].first);
    }
    info.set_bytes(static_cast<int64_t>(bucket.nbytes()));
    info.set_limit_bytes(static_cast<int64_t>(bucket.size_limit));
    info.set_dtype(std::string(DTypeName(bucket.gradients.dtype())));
  }
  return infos;
}

void LogConstruction(DdpLoggingData& logging, const comm::ProcessGroup& group,
                     const NamedTensors& params, const ReducerOptions& options,
                     const std::vector<Bucket>& buckets, const BucketAssignment& initial) {
  logging.set_world_size(group.size());
  logging.set_rank(group.rank());
  logging.set_backend_name(std::string(group.backend_name()));
  logging.set_num_parameter_tensors(static_cast<int32_t>(params.size()));
  logging.set_bucket_cap_bytes(static_cast<int64_t>(options.limits.bucket_cap_bytes));
  logging.set_first_bucket_bytes(static_cast<int64_t>(options.limits.first_bucket_bytes));
  logging.set_find_unused_parameters(options.find_unused_parameters);
  logging.set_gradient_as_bucket_view(options.gradient_as_bucket_view);
  logging.set_debug_level(std::string(comm::DebugLevelName(group.options().debug_level)));
  int64_t total_bytes = 0;
  for (const auto& [name, p] : params) {
    total_bytes += static_cast<int64_t>(p.nbytes());
    const std::string dtype(DTypeName(p.dtype()));
    if (std::find(logging.dtypes().begin(), logging.dtypes().end(), dtype) ==
        logging.dtypes().end()) {
      logging.add_dtypes(dtype);
    }
  }
  logging.set_total_parameter_size_bytes(total_bytes);
  for (BucketInfo& info : BucketInfosOf(buckets, params)) {
    *logging.add_initial_buckets() = std::move(info);
  }
  logging.mutable_pytorch()->set_bucket_sizes(PyTorchSizes(logging.initial_buckets()));
  logging.set_can_set_static_graph(true);  // until the graph is seen to change
  if (DebugOn(group)) {
    Log(LogLevel::kInfo,
        StrCat("DDP reducer: ", buckets.size(), " bucket(s) ", BucketsToString(initial.buckets),
               ", bucket cap ", options.limits.bucket_cap_bytes, " B, first bucket ",
               options.limits.first_bucket_bytes, " B"));
  }
}

void LogRebuild(DdpLoggingData& logging, const comm::ProcessGroup& group,
                const NamedTensors& params, const std::vector<Bucket>& buckets,
                const BucketAssignment& rebuilt) {
  logging.set_has_rebuilt_buckets(true);
  logging.clear_rebuilt_buckets();
  for (BucketInfo& info : BucketInfosOf(buckets, params)) {
    *logging.add_rebuilt_buckets() = std::move(info);
  }
  PyTorchFields& pytorch = *logging.mutable_pytorch();
  pytorch.set_rebuilt_bucket_sizes(PyTorchSizes(logging.rebuilt_buckets()));
  pytorch.set_rebuilt_per_bucket_param_indices(PyTorchIndices(logging.rebuilt_buckets()));
  if (DebugOn(group)) {
    Log(LogLevel::kInfo, StrCat(buckets.size(), " bucket(s) rebuilt in gradient-arrival order: ",
                                BucketsToString(rebuilt.buckets), ", limits ",
                                absl::StrJoin(rebuilt.limits, ", "), " bytes"));
  }
}

void LogIterationUsage(DdpLoggingData& logging, const NamedTensors& params, bool track_unused,
                       absl::FunctionRef<bool(size_t)> globally_unused,
                       const std::vector<size_t>& grad_ready_order) {
  logging.clear_unused_parameter_names();
  int64_t unused_bytes = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    if (track_unused && globally_unused(i)) {
      logging.add_unused_parameter_names(params[i].first);
      unused_bytes += static_cast<int64_t>(params[i].second.nbytes());
    }
  }
  logging.set_unused_parameter_size(unused_bytes);
  logging.clear_prev_iteration_grad_ready_order_indices();
  for (size_t index : grad_ready_order) {
    logging.add_prev_iteration_grad_ready_order_indices(static_cast<int32_t>(index));
  }
  logging.mutable_pytorch()->set_prev_iteration_grad_ready_order_indices(
      absl::StrJoin(grad_ready_order, ", "));
}

void LogForward(DdpLoggingData& logging, int64_t num_iterations, bool buckets_reduced) {
  logging.set_iteration(num_iterations);
  if (!PyTorchSamples(num_iterations - 1)) return;
  logging.mutable_pytorch()->set_iteration(num_iterations - 1);
  // Sampled here, before this forward's backward: PyTorch's reads the previous backward's.
  if (buckets_reduced) {
    logging.mutable_pytorch()->set_num_buckets_reduced(logging.num_buckets_reduced());
  }
}

void LogUnusedSet(DdpLoggingData& logging, std::vector<size_t>& previous,
                  const std::vector<size_t>& unused, int64_t num_iterations) {
  if (num_iterations > 1 && previous != unused) logging.set_can_set_static_graph(false);
  previous = unused;
}

void IterationTimer::Totals::Add(const Totals& one) {
  forward += one.forward, compute += one.compute, comm += one.comm;
  overlap += one.overlap, exposed += one.exposed, count += one.count;
}

// Overlap: the part of the communication that ran before compute ended; exposed: finalize's
// wait after it.
void IterationTimer::Record(Clock::time_point comm_end, Clock::time_point finalize_end,
                            DdpLoggingData& logging, bool log_detail) {
  Totals one{.forward = Nanos(backward_start_ - forward_start_),
             .compute = Nanos(compute_end_ - backward_start_),
             .comm = Nanos(comm_end - comm_start_),
             .overlap = std::max<int64_t>(0, Nanos(std::min(compute_end_, comm_end) - comm_start_)),
             .exposed = Nanos(finalize_end - compute_end_),
             .count = 1};
  totals_.Add(one);
  if (totals_.count > 2) steady_.Add(one);

  const int64_t count = std::max<int64_t>(1, totals_.count);
  logging.set_avg_forward_compute_time(totals_.forward / count);
  logging.set_avg_backward_compute_time(totals_.compute / count);
  logging.set_avg_backward_comm_time(totals_.comm / count);
  logging.set_avg_backward_compute_comm_overlap_time(totals_.overlap / count);
  logging.set_avg_backward_exposed_comm_time(totals_.exposed / count);
  logging.set_num_timed_iterations(totals_.count);
  if (steady_.count > 0) {
    TimedAverages& steady = *logging.mutable_steady_averages();
    steady.set_forward_compute_time(steady_.forward / steady_.count);
    steady.set_backward_compute_time(steady_.compute / steady_.count);
    steady.set_backward_comm_time(steady_.comm / steady_.count);
    steady.set_backward_compute_comm_overlap_time(steady_.overlap / steady_.count);
    steady.set_backward_exposed_comm_time(steady_.exposed / steady_.count);
    steady.set_iterations(steady_.count);
  }
  if (log_detail) {
    Log(LogLevel::kInfo,
        StrCat("[rank ", logging.rank(), " / ", logging.world_size(), "] iteration ",
               logging.iteration(), ": unused_parameter_size=", logging.unused_parameter_size(),
               " avg forward ", logging.avg_forward_compute_time(), " ns, backward compute ",
               logging.avg_backward_compute_time(), " ns, comm ", logging.avg_backward_comm_time(),
               " ns, overlap ", logging.avg_backward_compute_comm_overlap_time(), " ns"));
  }
}

}  // namespace ddpkit::reducer
