// The job flags several subcommands share (--model, --batch-size, --steps, --lr, --json, ...),
// defined once here; a subcommand's own flags live in its *_command.cc.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "tools/jobs/training.h"

ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(std::string, weights);
ABSL_DECLARE_FLAG(bool, sync_batchnorm);
ABSL_DECLARE_FLAG(std::string, device);
ABSL_DECLARE_FLAG(std::string, data);
ABSL_DECLARE_FLAG(std::string, text);
ABSL_DECLARE_FLAG(std::string, eval_data);
ABSL_DECLARE_FLAG(int32_t, batch_size);
ABSL_DECLARE_FLAG(int32_t, steps);
ABSL_DECLARE_FLAG(double, lr);
ABSL_DECLARE_FLAG(double, momentum);
ABSL_DECLARE_FLAG(std::string, optimizer);
ABSL_DECLARE_FLAG(std::string, loss);
ABSL_DECLARE_FLAG(uint64_t, seed);
ABSL_DECLARE_FLAG(std::string, save_weights);
ABSL_DECLARE_FLAG(bool, json);
ABSL_DECLARE_FLAG(std::string, out);
ABSL_DECLARE_FLAG(std::string, trace);

namespace ddpkit::cli {

// What `ddpkit train` and `ddpkit join` share: the job flags above and the comm and DDP flags.
extern const std::vector<std::string> kDdpTrainingFlagNames;

// The config's model, weights, batch size, optimizer, seed, saved weights, world, DDP options
// and comm hook from the flags; InvalidArgument naming the flag.
absl::Status DdpTrainingFromFlags(jobs::DdpTrainingConfig& config);

// --device parsed; InvalidArgument naming the flag.
absl::StatusOr<Device> DeviceFromFlag();
// Whether each process of a run on `backend` (a report's name for it) wrote its own trace.
bool TracesPerRank(std::string_view backend);
// "trace written to FILE" (threads) or "... to FILE.rank<r>.json on each rank" (gloo, mpi, nccl).
std::string TraceWrittenLine(const std::string& path, const std::string& backend, int rank);

}  // namespace ddpkit::cli
