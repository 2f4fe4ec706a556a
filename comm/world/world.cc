#include "comm/world/world.h"

#include <cstdlib>

#include "autograd/base/log.h"
#include "autograd/compute_threads.h"
#include "comm/mpi/mpi_runtime.h"
#include "comm/nccl/process_group_nccl.h"
#include "comm/round_robin.h"
#include "comm/threads/threads_world.h"
#include "comm/world/env_rendezvous.h"
#include "comm/world/rendezvous.h"
#include "comm/world/thread_budget.h"

namespace ddpkit::comm {

absl::Status ValidateWorldSpec(const WorldSpec& world) {
  const BackendInfo& backend = InfoOf(world.backend);
  if (backend.needs_cuda && !kWithCuda) return absl::InvalidArgumentError(kNcclUnavailable);
  if (backend.launcher == Launcher::kNone &&
      (world.world_size < 1 || world.world_size > kMaxThreadsWorldSize)) {
    return absl::InvalidArgumentError(
        StrCat("--world-size must be in [1, ", kMaxThreadsWorldSize,
               "] for the threads backend (one thread per rank), got ", world.world_size,
               "; for more ranks use --backend gloo under `ddpkit launch`"));
  }
  if (world.threads_per_rank < 0 || world.threads_per_rank > kMaxThreadsWorldSize) {
    return absl::InvalidArgumentError(StrCat("--threads-per-rank must be in [0, ",
                                             kMaxThreadsWorldSize, "] (0: cores / ranks), got ",
                                             world.threads_per_rank));
  }
  if (world.round_robin_groups < 1 || world.round_robin_groups > kMaxRoundRobinGroups) {
    return absl::InvalidArgumentError(
        StrCat("--round-robin-groups must be in [1, ", kMaxRoundRobinGroups,
               "] (process groups per rank, used in turn), got ", world.round_robin_groups));
  }
  if (!backend.round_robin && world.round_robin_groups != 1) {
    return absl::InvalidArgumentError(StrCat(
        "--round-robin-groups ", world.round_robin_groups, " is not supported with --backend ",
        backend.name, " (one communicator per rank); use 1, or --backend gloo or threads"));
  }
  if (!(world.options.timeout > absl::ZeroDuration())) {
    return absl::InvalidArgumentError(StrCat("--timeout must be > 0 seconds, got ",
                                             absl::ToDoubleSeconds(world.options.timeout)));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> WorldSize(const WorldSpec& world) {
  switch (InfoOf(world.backend).launcher) {
    case Launcher::kNone: return world.world_size;
    case Launcher::kMpirun:
      DDPKIT_RETURN_IF_ERROR(mpi::EnsureInitialized());
      return mpi::WorldSize();
    case Launcher::kEnvRendezvous: break;
  }
  DDPKIT_ASSIGN_OR_RETURN(EnvRendezvous env, ReadEnvRendezvous());
  return env.world_size;
}

namespace {

// This process's rank of a world of processes (gloo, mpi, nccl).
absl::StatusOr<std::unique_ptr<DistributedWorld>> JoinWorld(const WorldSpec& world) {
  if (world.backend == Backend::kMpi) {
    return DistributedWorld::InitMpi(world.options, world.round_robin_groups);
  }
  DDPKIT_ASSIGN_OR_RETURN(EnvRendezvous env, ReadEnvRendezvous());
  if (world.backend == Backend::kNccl) return DistributedWorld::InitNccl(env, world.options);
  return DistributedWorld::InitGloo(env, world.options, world.round_robin_groups);
}

// The body's error as a Status whether returned or thrown (a failed collective inside DDP's
// backward throws): a rank that ended by an exception would skip its check-out, and leave its
// peers waiting for it until the timeout.
absl::Status RunBody(const std::function<absl::Status(ProcessGroup&)>& body, ProcessGroup& group) {
  try {
    return body(group);
  } catch (const Error& e) {
    return e.ToStatus();
  } catch (const std::exception& e) {
    return absl::InternalError(e.what());
  }
}

}  // namespace

absl::Status RunOnWorld(const WorldSpec& world,
                        const std::function<absl::Status(ProcessGroup&)>& body) {
  DDPKIT_RETURN_IF_ERROR(ValidateWorldSpec(world));
  DDPKIT_ASSIGN_OR_RETURN(const ThreadBudget budget, ResolveThreadBudget(world));
  SetComputeThreads(budget.threads);
  if (world.backend == Backend::kThreads) {
    return RunThreadsWorld(world.world_size, body, world.options, world.round_robin_groups);
  }
  DDPKIT_ASSIGN_OR_RETURN(std::unique_ptr<DistributedWorld> distributed, JoinWorld(world));
  // As a threads world's rank threads do: a line says which rank spoke (mpirun and torchrun do
  // not tag their ranks' stderr), unless `ddpkit launch` already tags every line.
  if (std::getenv(kLauncherTagsLinesEnv) == nullptr) {
    SetThreadLogPrefix(StrCat("rank ", distributed->group().rank()));
  }
  return RunBody(body, distributed->group());
}

bool ReportsForProcess(const WorldSpec& world, const ProcessGroup& group) {
  return !InfoOf(world.backend).ranks_share_process || group.rank() == 0;
}

}  // namespace ddpkit::comm
