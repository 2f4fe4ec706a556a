// The jobs behind `ddpkit bench`: measurements beside references taken in the same run.
//  * ddp: what DDP costs per step — the DDP step against the same model's plain step on this
//    rank (on a world of one, the reducer's own cost), exposed against total communication, and
//    step time against bucket_cap_mb, as in the DDP paper (Li et al., 2020);
//  * allreduce: bandwidth in nccl-tests' columns, against memcpy on this machine (and, on the
//    gloo and mpi backends, the library's own allreduce called directly);
//  * paper: the DDP paper's three experiments — the step's latency breakdown with overlap on and
//    off, step time against bucket_cap_mb, and skipping synchronisation with no_sync.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "autograd/nn/models/zoo.h"
#include "reducer/pytorch_version.h"
#include "tools/jobs/allreduce_profile.pb.h"
#include "tools/jobs/bench/bench_report.pb.h"
#include "tools/jobs/job.h"

namespace ddpkit::jobs {

// The model a DDP benchmark times: any spec of the model zoo (mlp:, resnet:, gpt:), refused
// (InvalidArgument) when it does not parse or `world` ranks of it would not fit in memory.
absl::StatusOr<models::ModelSpec> ParseBenchModel(const std::string& model, int batch_size,
                                                  const comm::WorldSpec& world);
// One rank's rows, the same every step: the model's synthetic data (float rows or NCHW images
// with labels [rows]; int64 token rows with a label per position for a GPT).
struct BenchBatch {
  Tensor x, y;
};
BenchBatch MakeBenchBatch(const models::ModelSpec& model, int64_t rows, int rank);
// The model's forward on the batch and the mean cross-entropy (over every position of a GPT).
Tensor BenchLoss(nn::Module& model, const BenchBatch& batch);

struct BenchDdpConfig {
  comm::WorldSpec world;  // --backend, --world-size, --timeout, --threads-per-rank, ...
  std::string model = "mlp:32,64,64,10";  // any spec of the model zoo (ParseBenchModel)
  int batch_size = 32;                    // rows per rank
  int iters = 20;                         // timed steps per measurement (a median)
  int warmup_iters = 5;
  std::vector<double> bucket_caps = {0.5, 1, 5, 10, 25, 50};
  std::string trace_path;  // a Chrome trace of the DDP steps when set
  reducer::PyTorchVersion pytorch_version = reducer::kDefaultPyTorch;  // whose DDP
};
absl::StatusOr<BenchDdpReport> BenchDdp(const BenchDdpConfig& config);

struct BenchAllreduceConfig {
  comm::WorldSpec world;         // --backend, --world-size, --timeout, --threads-per-rank, ...
  int64_t min_bytes = 1024;      // sizes double from here ...
  int64_t max_bytes = 16 << 20;  // ... up to here
  int iters = 20;
  int warmup_iters = 5;
  Device device = Device::Cpu();  // where the buffers live (nccl: each rank's own GPU)
};
absl::StatusOr<BenchAllreduceReport> BenchAllreduce(const BenchAllreduceConfig& config);

// The DDP paper's experiments (paper.cc).
struct BenchPaperConfig {
  comm::WorldSpec world;  // --backend, --world-size, --timeout, --threads-per-rank, ...
  // Five weight matrices of 3-16 MB: enough tensors and bytes for the bucket cap to matter.
  // Any spec of the model zoo (ParseBenchModel).
  std::string model = "mlp:784,2048,2048,2048,2048,10";
  int batch_size = 64;  // rows per rank
  int iters = 10;       // timed steps per measurement
  int warmup_iters = 3;
  std::vector<double> bucket_caps = {0, 0.5, 1, 5, 10, 25, 50, 100};  // 0: one per parameter
  std::vector<int> sync_every = {1, 2, 4, 8};
  std::string out_dir;  // "": no files; else paper.svg (and the report's svg_path)
  reducer::PyTorchVersion pytorch_version = reducer::kDefaultPyTorch;  // whose DDP
  // Called on rank 0 before each measurement: "3/14 step time at bucket_cap_mb 0.5".
  std::function<void(const std::string&)> progress;
};
absl::StatusOr<BenchPaperReport> BenchPaper(const BenchPaperConfig& config);
// The three plots side by side: the breakdown, the cap sweep, the no_sync sweep.
std::string PaperSvg(const BenchPaperReport& report);

}  // namespace ddpkit::jobs
