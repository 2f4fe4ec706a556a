// `ddpkit bench ddp`: what DDP costs per step, against references measured in the same run.
//  * overhead: DDP forward+backward vs the same model's plain forward+backward on this rank
//    (on a world of one this is the reducer's own cost: hooks, bucket copies, finalize);
//  * overlap: exposed communication (DDP step - local step) against the total allreduce time
//    the reducer measured: what backward hid is the difference;
//  * bucket-cap sweep: step time vs bucket_cap_mb, as in the DDP paper (Li et al., 2020).
#include "tools/bench_ddp.h"

#include <algorithm>
#include <chrono>
#include <iostream>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "autograd/ops.h"
#include "autograd/optim.h"
#include "autograd/random.h"
#include "reducer/distributed_data_parallel.h"

ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(int32_t, batch_size);
ABSL_DECLARE_FLAG(int32_t, iters);
ABSL_DECLARE_FLAG(int32_t, warmup_iters);
ABSL_FLAG(std::string, bucket_caps, "0.5,1,5,10,25,50", "bucket_cap_mb values for the sweep");

namespace ddpkit::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct StepInputs {  // one rank's batch
  Tensor x, y;
};

// Median milliseconds of `step` and of `reference` over `iters` runs each, interleaved so that
// both see the same machine state, after `warmup` untimed runs. The slowest rank's medians (a
// MAX allreduce), since a synchronous step is as slow as its slowest rank.
absl::StatusOr<std::pair<double, double>> MedianMs(comm::ProcessGroup& group, int warmup, int iters,
                                                   const std::function<void()>& step,
                                                   const std::function<void()>& reference) {
  for (int i = 0; i < warmup; ++i) {
    step();
    reference();
  }
  std::vector<double> ms, ref_ms;
  auto time = [](const std::function<void()>& f) {
    const auto start = Clock::now();
    f();
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  };
  for (int i = 0; i < iters; ++i) {
    ms.push_back(time(step));
    ref_ms.push_back(time(reference));
  }
  auto median = [](std::vector<double>& v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  Tensor slowest = Tensor::FromVector<double>({median(ms), median(ref_ms)}, {2});
  DDPKIT_RETURN_IF_ERROR(group.Allreduce(slowest, comm::ReduceOp::kMax)->Wait());
  return std::pair{slowest.at(0), slowest.at(1)};
}

void ZeroGrads(nn::Module& model) {
  for (const Tensor& p : model.Parameters()) p.set_grad(Tensor());
}

void ZeroGradsInPlace(nn::Module& model) {
  for (const Tensor& p : model.Parameters()) {
    if (p.grad().defined()) p.grad().Zero();
  }
}

}  // namespace

absl::Status BenchDdp(comm::ProcessGroup& group) {
  const std::string spec = absl::GetFlag(FLAGS_model);
  DDPKIT_ASSIGN_OR_RETURN(std::vector<int64_t> widths, nn::ParseMlpSpec(spec));
  const int batch = absl::GetFlag(FLAGS_batch_size);
  const int iters = absl::GetFlag(FLAGS_iters),
            warmup = std::max(2, absl::GetFlag(FLAGS_warmup_iters));
  if (batch <= 0 || iters < 1)
    return absl::InvalidArgumentError("need --batch-size > 0 and --iters >= 1");
  std::vector<double> caps;
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_bucket_caps), ',', absl::SkipEmpty())) {
    double cap;
    if (!absl::SimpleAtod(part, &cap) || !(cap > 0)) {
      return absl::InvalidArgumentError(
          StrCat("--bucket-caps: '", std::string(part), "' is not a positive number"));
    }
    caps.push_back(cap);
  }
  const bool print = group.rank() == 0;

  StepInputs in{Tensor::Empty({batch, widths.front()}), Tensor::Zeros({batch}, DType::kInt64)};
  Generator(group.rank() + 1).FillNormal(in.x);
  for (int64_t i = 0; i < batch; ++i) in.y.data<int64_t>()[i] = i % widths.back();

  auto local = nn::MakeMlp(widths, 0);
  auto local_step = [&] {
    ZeroGrads(*local);
    CrossEntropy(local->Forward(in.x), in.y).Backward();
  };
  auto model = nn::MakeMlp(widths, 0);
  DDPKIT_ASSIGN_OR_RETURN(auto ddp, reducer::DistributedDataParallel::Create(model, group, {}));
  DDPKIT_ASSIGN_OR_RETURN(auto times, MedianMs(
                                          group, warmup, iters,
                                          [&] {
                                            ZeroGrads(*model);
                                            CrossEntropy(ddp->Forward(in.x), in.y).Backward();
                                          },
                                          local_step));
  const auto [ddp_ms, local_ms] = times;
  // The same with gradient_as_bucket_view and gradients zeroed in place, against a local step
  // that also zeroes in place: .grad stays the bucket view, so no copy goes in or out.
  auto local_in_place = nn::MakeMlp(widths, 0);
  auto view_model = nn::MakeMlp(widths, 0);
  DDPKIT_ASSIGN_OR_RETURN(auto view_ddp, reducer::DistributedDataParallel::Create(
                                             view_model, group, {.gradient_as_bucket_view = true}));
  DDPKIT_ASSIGN_OR_RETURN(auto view_times,
                          MedianMs(
                              group, warmup, iters,
                              [&] {
                                ZeroGradsInPlace(*view_model);
                                CrossEntropy(view_ddp->Forward(in.x), in.y).Backward();
                              },
                              [&] {
                                ZeroGradsInPlace(*local_in_place);
                                CrossEntropy(local_in_place->Forward(in.x), in.y).Backward();
                              }));
  const reducer::DdpLoggingData& log = ddp->LoggingData();
  const double comm_ms = log.avg_backward_comm_time() / 1e6;

  if (print) {
    std::cout << absl::StrFormat(
        "# ddpkit bench ddp: %s, %d parameter tensors (%d bytes), batch %d per rank, backend %s, "
        "world size %d\n# median of %d steps (forward + backward, grads zeroed to none) after %d "
        "warm-up steps; the slowest rank's median\n#\n",
        spec, log.num_parameter_tensors(), log.total_parameter_size_bytes(), batch,
        group.backend_name(), group.size(), iters, warmup);
    std::cout << absl::StrFormat("%-34s %10.3f ms\n", "local step (no DDP, reference)", local_ms)
              << absl::StrFormat("%-34s %10.3f ms   ratio %.3f  (%d bucket(s) after the rebuild)\n",
                                 "DDP step (default options)", ddp_ms, ddp_ms / local_ms,
                                 log.rebuilt_buckets_size())
              << absl::StrFormat(
                     "%-34s %10.3f ms   ratio %.3f  vs local zeroing in place, %.3f ms\n",
                     "DDP step (bucket views, in place)", view_times.first,
                     view_times.first / view_times.second, view_times.second)
              << absl::StrFormat("%-34s %10.3f ms\n", "exposed comm (DDP - local)",
                                 ddp_ms - local_ms)
              << absl::StrFormat("%-34s %10.3f ms   (first launch -> last bucket reduced, avg)\n",
                                 "total allreduce time", comm_ms)
              << absl::StrFormat("%-34s %10.3f ms   (avg)\n", "  of which overlapped backward",
                                 log.avg_backward_compute_comm_overlap_time() / 1e6);
    if (group.size() == 1) {
      std::cout << "# world size 1: the ratio is the reducer's own overhead (target <= 1.03)\n";
    }
    std::cout << absl::StrFormat("#\n# bucket-cap sweep\n%14s  %8s  %12s  %18s\n", "bucket_cap_mb",
                                 "buckets", "step(ms)", "vs local (same run)");
  }
  for (double cap : caps) {
    auto swept = nn::MakeMlp(widths, 0);
    DDPKIT_ASSIGN_OR_RETURN(auto swept_ddp, reducer::DistributedDataParallel::Create(
                                                swept, group, {.bucket_cap_mb = cap}));
    DDPKIT_ASSIGN_OR_RETURN(auto swept_times,
                            MedianMs(
                                group, warmup, iters,
                                [&] {
                                  ZeroGrads(*swept);
                                  CrossEntropy(swept_ddp->Forward(in.x), in.y).Backward();
                                },
                                local_step));
    if (print) {
      std::cout << absl::StrFormat("%14g  %8d  %12.3f  %18.3f\n", cap,
                                   swept_ddp->LoggingData().rebuilt_buckets_size(),
                                   swept_times.first, swept_times.first / swept_times.second);
    }
  }
  return absl::OkStatus();
}

}  // namespace ddpkit::cli
