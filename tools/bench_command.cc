// `ddpkit bench allreduce`: allreduce bandwidth in nccl-tests' columns, beside references
// measured in the same run (memcpy on this machine; raw Gloo for the gloo backend).
#include <cstring>
#include <iostream>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "comm/gloo/process_group_gloo.h"
#include "comm/rendezvous.h"
#include "comm/threads/threads_world.h"
#include "tools/bench_ddp.h"
#include "tools/cli/commands.h"
#include "tools/comm_flags.h"

ABSL_FLAG(int64_t, min_bytes, 1024, "smallest message size in bytes");
ABSL_FLAG(int64_t, max_bytes, 16 << 20, "largest message size in bytes (sizes double)");
ABSL_FLAG(int32_t, iters, 20, "timed iterations per size");
ABSL_FLAG(int32_t, warmup_iters, 5, "untimed iterations per size");

namespace ddpkit::cli {
namespace {

using comm::ProcessGroup;

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

// Runs the sweep on one rank; rank 0 prints. Times are the slowest rank's (a MAX allreduce).
absl::Status Sweep(ProcessGroup& group, bool raw_gloo_reference) {
  const int n = group.size();
  const int iters = absl::GetFlag(FLAGS_iters), warmup = absl::GetFlag(FLAGS_warmup_iters);
  const int64_t min_bytes = std::max<int64_t>(4, absl::GetFlag(FLAGS_min_bytes));
  const int64_t max_bytes = absl::GetFlag(FLAGS_max_bytes);
  if (max_bytes < min_bytes || iters < 1) {
    return absl::InvalidArgumentError("need --max-bytes >= --min-bytes and --iters >= 1");
  }
  const bool print = group.rank() == 0;
  if (print) {
    const double copy = MemcpySeconds(max_bytes);
    std::cout << absl::StrFormat(
        "# ddpkit bench allreduce: backend %s, world size %d, float32 sum, %d iterations (%d "
        "warm-up)\n"
        "# memcpy reference: %d bytes in %.1f us = %.2f GB/s\n#\n",
        group.backend_name(), n, iters, warmup, max_bytes, copy * 1e6, max_bytes / copy / 1e9);
    std::cout << absl::StrFormat("# %10s  %12s  %6s  %5s  %10s  %11s  %11s  %6s", "size", "count",
                                 "type", "redop", "time(us)", "algbw(GB/s)", "busbw(GB/s)",
                                 "#wrong");
    if (raw_gloo_reference) std::cout << absl::StrFormat("  %12s  %9s", "raw_gloo(us)", "ratio");
    std::cout << "\n";
  }
  double busbw_sum = 0;
  int sizes = 0;
  for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
    const int64_t count = bytes / 4;
    Tensor t = Tensor::Empty({count});
    // Correctness: every rank contributes rank + 1, so every element must be n(n+1)/2.
    t.Fill(group.rank() + 1);
    DDPKIT_RETURN_IF_ERROR(group.Allreduce(t)->Wait());
    int64_t wrong = 0;
    for (int64_t i = 0; i < count; ++i) wrong += t.data<float>()[i] != n * (n + 1) / 2.0f;
    for (int i = 0; i < warmup; ++i) DDPKIT_RETURN_IF_ERROR(group.Allreduce(t)->Wait());
    DDPKIT_RETURN_IF_ERROR(group.Barrier()->Wait());
    const absl::Time start = absl::Now();
    for (int i = 0; i < iters; ++i) DDPKIT_RETURN_IF_ERROR(group.Allreduce(t)->Wait());
    Tensor seconds =
        Tensor::Scalar(absl::ToDoubleSeconds(absl::Now() - start) / iters, DType::kFloat64);
    DDPKIT_RETURN_IF_ERROR(group.Allreduce(seconds, comm::ReduceOp::kMax)->Wait());
    Tensor wrong_total = Tensor::Scalar(static_cast<double>(wrong), DType::kFloat64);
    DDPKIT_RETURN_IF_ERROR(group.Allreduce(wrong_total)->Wait());
    double raw = 0;
    if (raw_gloo_reference) {
      DDPKIT_RETURN_IF_ERROR(group.Barrier()->Wait());
      DDPKIT_ASSIGN_OR_RETURN(absl::Duration d, comm::TimeRawGlooAllreduce(group, count, iters));
      Tensor raw_max = Tensor::Scalar(absl::ToDoubleSeconds(d), DType::kFloat64);
      DDPKIT_RETURN_IF_ERROR(group.Allreduce(raw_max, comm::ReduceOp::kMax)->Wait());
      raw = raw_max.item();
    }
    const double time = seconds.item();
    const double algbw = bytes / time / 1e9;
    const double busbw = algbw * 2.0 * (n - 1) / n;  // nccl-tests' allreduce factor
    busbw_sum += busbw;
    ++sizes;
    if (print) {
      std::cout << absl::StrFormat("  %10d  %12d  %6s  %5s  %10.1f  %11.3f  %11.3f  %6d", bytes,
                                   count, "float", "sum", time * 1e6, algbw, busbw,
                                   static_cast<int64_t>(wrong_total.item()));
      if (raw_gloo_reference)
        std::cout << absl::StrFormat("  %12.1f  %9.2f", raw * 1e6, time / raw);
      std::cout << "\n";
    }
  }
  if (print) {
    std::cout << absl::StrFormat("# Avg bus bandwidth    : %.3f GB/s\n",
                                 busbw_sum / std::max(sizes, 1));
    if (raw_gloo_reference)
      std::cout << "# ratio = ddpkit time / raw Gloo time at the same size (target <= 1.10)\n";
  }
  return absl::OkStatus();
}

int RunBench(const std::vector<std::string>& positionals) {
  if (positionals.size() != 1 || (positionals[0] != "allreduce" && positionals[0] != "ddp")) {
    std::cerr << "ddpkit bench: name what to measure: 'ddpkit bench allreduce [flags]' or "
                 "'ddpkit bench ddp [flags]'\n";
    return kExitUsage;
  }
  const bool ddp = positionals[0] == "ddp";
  absl::StatusOr<CommSetup> setup = CommSetupFromFlags();
  if (!setup.ok()) {
    std::cerr << "ddpkit bench: " << setup.status().message() << "\n";
    return kExitUsage;
  }
  absl::Status status = RunOnWorld(*setup, [&](ProcessGroup& group) {
    return ddp ? BenchDdp(group) : Sweep(group, setup->backend == "gloo");
  });
  if (!status.ok()) {
    std::cerr << "ddpkit bench: " << status.message() << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

Subcommand BenchSubcommand() {
  return {.name = "bench",
          .summary = "measure allreduce bandwidth, or DDP's step cost, against references",
          .usage =
              "ddpkit bench allreduce [--backend threads|gloo] [--world-size N] [--min-bytes B] "
              "[--max-bytes B]\n       ddpkit bench ddp [--model mlp:...] [--batch-size B] "
              "[--world-size N] [--bucket-caps 0.5,1,...]",
          .flag_names = {"backend", "world_size", "timeout", "min_bytes", "max_bytes", "iters",
                         "warmup_iters", "model", "batch_size", "bucket_caps"},
          .takes_positionals = true,
          .run = RunBench};
}

}  // namespace ddpkit::cli
