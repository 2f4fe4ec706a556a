// `ddpkit bench allreduce`: allreduce bandwidth in nccl-tests' columns, beside references
// measured in the same run (memcpy on this machine; the library's own allreduce for gloo and mpi).
#include <algorithm>
#include <cstring>
#include <vector>

#include "autograd/cuda/runtime.h"
#include "comm/gloo/process_group_gloo.h"
#include "comm/mpi/allreduce_algorithm.h"
#include "comm/mpi/process_group_mpi.h"
#include "tools/jobs/bench/bench.h"
#include "tools/jobs/training.h"

namespace ddpkit::jobs {
namespace {

// Seconds for one copy of `bytes` within one GPU (the best of several): its copy bandwidth.
double DeviceCopySeconds(int64_t bytes, Device device) {
  Tensor src = Tensor::Full({bytes / 4}, 1.0, DType::kFloat32, device);
  Tensor dst = Tensor::Empty({bytes / 4}, DType::kFloat32, device);
  const cuda::Stream stream = cuda::CurrentStream(device);
  double best = 1e30;
  for (int i = 0; i < 10; ++i) {
    cuda::Synchronize(stream);
    const absl::Time start = absl::Now();
    dst.CopyFrom(src);
    cuda::Synchronize(stream);
    best = std::min(best, absl::ToDoubleSeconds(absl::Now() - start));
  }
  return best;
}

// Seconds for one memcpy of `bytes` (the best of several), the machine's copy bandwidth.
double MemcpySeconds(int64_t bytes) {
  std::vector<char> src(bytes, 1), dst(bytes);
  double best = 1e30;
  for (int i = 0; i < 10; ++i) {
    const absl::Time start = absl::Now();
    std::memcpy(dst.data(), src.data(), bytes);
    best = std::min(best, absl::ToDoubleSeconds(absl::Now() - start));
    if (dst[bytes / 2] != 1) return 0;  // keeps the copy observable
  }
  return best;
}

// The largest value of `value` over all ranks.
absl::StatusOr<double> Slowest(comm::ProcessGroup& group, double value) {
  Tensor t = Tensor::Scalar(value, DType::kFloat64);
  DDPKIT_RETURN_IF_ERROR(group.Allreduce(t, comm::ReduceOp::kMax)->Wait());
  return t.item();
}

// Every rank contributes rank + 1, so every element must be n(n+1)/2; the wrong ones over all
// ranks.
absl::StatusOr<int64_t> CountWrong(comm::ProcessGroup& group, Tensor& t) {
  const int n = group.size();
  t.Fill(group.rank() + 1);
  DDPKIT_RETURN_IF_ERROR(group.Allreduce(t)->Wait());
  int64_t wrong = 0;
  const std::vector<double> values = t.ToDoubles();  // from a GPU too
  for (double v : values) wrong += static_cast<float>(v) != n * (n + 1) / 2.0f;
  Tensor total = Tensor::Scalar(static_cast<double>(wrong), DType::kFloat64);
  DDPKIT_RETURN_IF_ERROR(group.Allreduce(total)->Wait());
  return static_cast<int64_t>(total.item());
}

// Seconds per call over `iters` allreduces of `t` through ddpkit's group.
absl::StatusOr<double> DdpkitSeconds(comm::ProcessGroup& group, const Tensor& t, int iters) {
  DDPKIT_RETURN_IF_ERROR(group.Barrier()->Wait());
  const absl::Time start = absl::Now();
  for (int i = 0; i < iters; ++i) DDPKIT_RETURN_IF_ERROR(group.Allreduce(t)->Wait());
  return absl::ToDoubleSeconds(absl::Now() - start) / iters;
}

// Seconds per round over `iters` rounds of one allreduce on each of a round-robin composite's K
// groups at once (`tensors`: K of them, so that no two share a buffer), each round waited for.
absl::StatusOr<double> ConcurrentSeconds(comm::ProcessGroup& group, std::vector<Tensor>& tensors,
                                         int iters) {
  DDPKIT_RETURN_IF_ERROR(group.Barrier()->Wait());
  const absl::Time start = absl::Now();
  std::vector<std::shared_ptr<comm::Work>> works(tensors.size());
  for (int i = 0; i < iters; ++i) {
    for (size_t k = 0; k < tensors.size(); ++k) works[k] = group.Allreduce(tensors[k]);
    for (auto& work : works) DDPKIT_RETURN_IF_ERROR(work->Wait());
  }
  return absl::ToDoubleSeconds(absl::Now() - start) / iters;
}

// Seconds per call over `iters` of the library's own allreduce on the same connections.
absl::StatusOr<double> RawSeconds(const BenchAllreduceConfig& config, comm::ProcessGroup& group,
                                  int64_t count, int iters) {
  DDPKIT_RETURN_IF_ERROR(group.Barrier()->Wait());
  DDPKIT_ASSIGN_OR_RETURN(absl::Duration d, config.world.backend == comm::Backend::kGloo
                                                ? comm::TimeRawGlooAllreduce(group, count, iters)
                                                : comm::TimeRawMpiAllreduce(group, count, iters));
  return absl::ToDoubleSeconds(d);
}

// Timed calls come in kRounds blocks; with a raw reference, its blocks alternate with ddpkit's,
// so that a slow spell of this noisy machine falls on both. Each side reports its median block.
constexpr int kRounds = 5;

// One size: correctness, then the time per allreduce after `warmup` (and the raw library
// allreduce's at the same size for gloo and mpi), the slowest rank's.
absl::StatusOr<AllreducePoint> Measure(const BenchAllreduceConfig& config,
                                       comm::ProcessGroup& group, int64_t bytes,
                                       const std::string& raw) {
  AllreducePoint point;
  point.set_bytes(bytes);
  point.set_count(bytes / 4);
  Tensor t = Tensor::Empty({point.count()}, DType::kFloat32, RankDevice(config.device, group));
  DDPKIT_ASSIGN_OR_RETURN(const int64_t wrong, CountWrong(group, t));
  point.set_wrong(wrong);
  for (int i = 0; i < config.warmup_iters; ++i) DDPKIT_RETURN_IF_ERROR(group.Allreduce(t)->Wait());
  const int rounds = std::min(kRounds, config.iters);
  const int per_round = (config.iters + rounds - 1) / rounds;
  std::vector<double> ours, theirs, together;
  const int groups = config.world.round_robin_groups;
  std::vector<Tensor> per_group;  // K buffers for the K allreduces at once
  for (int k = 0; k < groups && groups > 1; ++k) per_group.push_back(t.Clone());
  for (int r = 0; r < rounds; ++r) {
    DDPKIT_ASSIGN_OR_RETURN(const double s, DdpkitSeconds(group, t, per_round));
    ours.push_back(s);
    if (groups > 1) {
      DDPKIT_ASSIGN_OR_RETURN(const double s_k, ConcurrentSeconds(group, per_group, per_round));
      together.push_back(s_k);
    }
    if (raw.empty()) continue;
    DDPKIT_ASSIGN_OR_RETURN(const double s_raw,
                            RawSeconds(config, group, point.count(), per_round));
    theirs.push_back(s_raw);
  }
  DDPKIT_ASSIGN_OR_RETURN(const double seconds, Slowest(group, Median(ours)));
  const double algbw = bytes / seconds / 1e9;
  point.set_time_us(seconds * 1e6);
  point.set_algbw_gbps(algbw);
  point.set_busbw_gbps(algbw * 2.0 * (group.size() - 1) / group.size());
  if (!raw.empty()) {
    DDPKIT_ASSIGN_OR_RETURN(const double s_raw, Slowest(group, Median(theirs)));
    point.set_raw_us(s_raw * 1e6);
  }
  if (groups > 1) {
    DDPKIT_ASSIGN_OR_RETURN(const double s_k, Slowest(group, Median(together)));
    point.set_concurrent_us(s_k * 1e6);
    point.set_collective_share(std::clamp(s_k / (groups * seconds), 1.0 / groups, 1.0));
  }
  return point;
}

absl::StatusOr<BenchAllreduceReport> SweepOnRank(const BenchAllreduceConfig& config,
                                                 comm::ProcessGroup& group) {
  BenchAllreduceReport report;
  report.set_backend(std::string(group.backend_name()));
  report.set_world_size(group.size());
  report.set_rank(group.rank());
  // Round-robin composites hand collectives to several groups: no single library call to match.
  if (comm::InfoOf(config.world.backend).raw_allreduce && config.world.round_robin_groups == 1) {
    report.set_raw_reference(std::string(comm::BackendName(config.world.backend)));
  }
  report.set_device(RankDevice(config.device, group).ToString());
  report.set_round_robin_groups(config.world.round_robin_groups);
  if (config.world.backend == comm::Backend::kMpi) {
    report.set_algorithm(comm::mpi::DescribeAllreduceAlgorithms());
  }
  const int64_t min_bytes = std::max<int64_t>(4, config.min_bytes);
  double busbw_sum = 0;
  for (int64_t bytes = min_bytes; bytes <= config.max_bytes; bytes *= 2) {
    DDPKIT_ASSIGN_OR_RETURN(AllreducePoint point,
                            Measure(config, group, bytes, report.raw_reference()));
    busbw_sum += point.busbw_gbps();
    *report.add_points() = point;
  }
  report.set_avg_busbw_gbps(busbw_sum / std::max(1, report.points_size()));
  return report;
}

}  // namespace

absl::StatusOr<BenchAllreduceReport> BenchAllreduce(const BenchAllreduceConfig& config) {
  if (config.max_bytes < std::max<int64_t>(4, config.min_bytes) || config.iters < 1) {
    return absl::InvalidArgumentError("need --max-bytes >= --min-bytes and --iters >= 1");
  }
  DDPKIT_ASSIGN_OR_RETURN(
      BenchAllreduceReport report,
      RunOnEveryRank<BenchAllreduceReport>(
          config.world, [&](comm::ProcessGroup& group) { return SweepOnRank(config, group); }));
  report.set_iters(config.iters);
  report.set_warmup_iters(config.warmup_iters);
  report.set_memcpy_bytes(config.max_bytes);
  const Device device = report.device() == "cpu" ? Device::Cpu() : *ParseDevice(report.device());
  report.set_memcpy_us((device.is_cuda() ? DeviceCopySeconds(config.max_bytes, device)
                                         : MemcpySeconds(config.max_bytes)) *
                       1e6);
  return report;
}

}  // namespace ddpkit::jobs
