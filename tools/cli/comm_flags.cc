#include "tools/cli/comm_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, backend, "threads", ddpkit::comm::BackendHelp());
ABSL_FLAG(int32_t, world_size, 4, "ranks in the threads backend's world");
ABSL_FLAG(double, timeout, 300, "seconds any collective may take before it fails");
ABSL_FLAG(int32_t, threads_per_rank, 0,
          "compute (BLAS) threads per rank; 0: OPENBLAS_NUM_THREADS, else OMP_NUM_THREADS, else "
          "this host's cores / its ranks");
ABSL_FLAG(int32_t, round_robin_groups, 1,
          "process groups per rank, used in turn (collective i on group i mod K), so K collectives "
          "run at once; threads, gloo and mpi backends, 1 to 16");

namespace ddpkit::cli {

absl::Status WorldFromFlags(comm::WorldSpec& world) {
  const double timeout = absl::GetFlag(FLAGS_timeout);
  if (!(timeout > 0)) {
    return absl::InvalidArgumentError(StrCat("--timeout must be > 0 seconds, got ", timeout));
  }
  DDPKIT_ASSIGN_OR_RETURN(world.backend, comm::ParseBackend(absl::GetFlag(FLAGS_backend)));
  world.world_size = absl::GetFlag(FLAGS_world_size);
  world.threads_per_rank = absl::GetFlag(FLAGS_threads_per_rank);
  world.round_robin_groups = absl::GetFlag(FLAGS_round_robin_groups);
  world.options.timeout = absl::Seconds(timeout);
  // A failed collective leaves every rank's flight recorder here, for `ddpkit fr analyze`.
  if (world.options.fr_dump_dir.empty()) world.options.fr_dump_dir = "ddpkit_fr";
  return comm::ValidateWorldSpec(world);
}

}  // namespace ddpkit::cli
