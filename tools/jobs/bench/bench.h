// The jobs behind `ddpkit bench`: measurements beside references taken in the same run.
//  * ddp: what DDP costs per step — the DDP step against the same model's plain step on this
//    rank (on a world of one, the reducer's own cost), exposed against total communication, and
//    step time against bucket_cap_mb, as in the DDP paper (Li et al., 2020);
//  * allreduce: bandwidth in nccl-tests' columns, against memcpy on this machine (and, on the
//    gloo and mpi backends, the library's own allreduce called directly).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/jobs/bench/bench_report.pb.h"
#include "tools/jobs/job.h"

namespace ddpkit::jobs {

struct BenchDdpConfig : WorldConfig {
  std::string model = "mlp:32,64,64,10";
  int batch_size = 32;  // rows per rank
  int iters = 20;       // timed steps per measurement (a median)
  int warmup_iters = 5;
  std::vector<double> bucket_caps = {0.5, 1, 5, 10, 25, 50};
  std::string trace_path;  // a Chrome trace of the DDP steps when set
};
absl::StatusOr<BenchDdpReport> BenchDdp(const BenchDdpConfig& config);

struct BenchAllreduceConfig : WorldConfig {
  int64_t min_bytes = 1024;      // sizes double from here ...
  int64_t max_bytes = 16 << 20;  // ... up to here
  int iters = 20;
  int warmup_iters = 5;
  Device device = Device::Cpu();  // where the buffers live (nccl: each rank's own GPU)
};
absl::StatusOr<BenchAllreduceReport> BenchAllreduce(const BenchAllreduceConfig& config);

}  // namespace ddpkit::jobs
