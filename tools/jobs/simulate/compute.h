// The compute profile: how long each gradient takes. Either from FLOPs and a device throughput
// (backward = 2 x forward: the weight's gradient and the input's), or measured — a ddpkit
// --trace file, whose gradient hooks time every parameter's backward on this machine.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "tools/jobs/simulate/sim_model.h"

namespace ddpkit::jobs::sim {

// Forward, backward and optimizer times from each parameter's FLOPs at `gflops` GFLOP/s.
void ApplyThroughput(SimModel& model, double gflops);

// Median times over the trace's synced iterations after the first (rank 0): forward and
// optimizer phases, each hook's gap to the one before (the first: to backward's start), the
// tail after the last hook; the hooks' order becomes the grad-ready order. InvalidArgument
// when the trace's parameters are not the model's.
absl::Status ApplyTrace(SimModel& model, const std::string& path);

// --compute: "gflops=X", a device preset ("v100", "a100", "h100": an assumed sustained
// throughput, docs/simulate.md), or "trace=FILE".
absl::Status ApplyCompute(SimModel& model, const std::string& spec);

}  // namespace ddpkit::jobs::sim
