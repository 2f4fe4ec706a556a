// The skeleton every job behind a `ddpkit` subcommand follows (train, join, contrastive, bench,
// and every later one):
//
//   1. validate the config: bad input is an InvalidArgument naming the flag, returned before
//      any rank starts;
//   2. on every rank of the world: build the model and the data, run (RunOnEveryRank);
//   3. return the report of the rank this process reports for — rank 0 of a threads world;
//      under gloo, mpi and nccl each process its own, and the command line prints rank 0's.
//
// Jobs never read flags or print: tools/cli/ turns flags into a config and a report into text
// or JSON.
#pragma once

#include <functional>
#include <initializer_list>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "autograd/base/error.h"
#include "autograd/gemm.h"
#include "comm/world/world.h"
#include "tools/common/status.h"

namespace ddpkit::jobs {

// Runs `on_rank` on every rank of `world` and returns the report of the rank this process
// reports for, or the first error (an invalid DDPKIT_GEMM before any rank starts). A ddpkit::Error
// thrown on a rank becomes its Status.
template <typename Report>
absl::StatusOr<Report> RunOnEveryRank(
    const comm::WorldSpec& world,
    const std::function<absl::StatusOr<Report>(comm::ProcessGroup&)>& on_rank) {
  // A bad DDPKIT_GEMM is reported here, before any rank starts, not at the first GEMM (comm
  // knows nothing of GEMM libraries).
  if (absl::Status gemm = GemmLibraryFromEnv().status(); !gemm.ok()) return gemm;
  std::mutex mu;
  Report reported;
  absl::Status status = comm::RunOnWorld(world, [&](comm::ProcessGroup& group) -> absl::Status {
    absl::StatusOr<Report> report;
    try {
      report = on_rank(group);
    } catch (const Error& e) {
      return e.ToStatus();
    }
    if (!report.ok()) return report.status();
    if (comm::ReportsForProcess(world, group)) {
      std::lock_guard<std::mutex> lock(mu);
      reported = *std::move(report);
    }
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return reported;
}

// The upper median of `values` (0 for none): what every job reports of a noisy series.
double Median(std::vector<double> values);

// The shared wording (tools/common/status.h): a collective's failure, a bad flag value.
using common::RequireAtLeast;
using common::RequireOneOf;
using common::RequirePositive;
using common::WaitFor;

}  // namespace ddpkit::jobs
