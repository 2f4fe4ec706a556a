#include "tools/comm_flags.h"

#include "absl/flags/flag.h"
#include "comm/rendezvous.h"
#include "comm/threads/threads_world.h"

ABSL_FLAG(std::string, backend, "threads",
          "threads (ranks as threads of this process) or gloo (one process per rank, under "
          "`ddpkit launch`)");
ABSL_FLAG(int32_t, world_size, 4, "ranks in the threads backend's world");
ABSL_FLAG(double, timeout, 300, "seconds any collective may take before it fails");

namespace ddpkit::cli {

absl::StatusOr<CommSetup> CommSetupFromFlags() {
  CommSetup setup;
  setup.backend = absl::GetFlag(FLAGS_backend);
  setup.world_size = absl::GetFlag(FLAGS_world_size);
  if (setup.backend != "threads" && setup.backend != "gloo") {
    return absl::InvalidArgumentError(
        StrCat("--backend must be threads or gloo, got '", setup.backend, "'"));
  }
  if (setup.world_size < 1) {
    return absl::InvalidArgumentError(StrCat("--world-size must be >= 1, got ", setup.world_size));
  }
  const double timeout = absl::GetFlag(FLAGS_timeout);
  if (!(timeout > 0))
    return absl::InvalidArgumentError(StrCat("--timeout must be > 0 seconds, got ", timeout));
  setup.options.timeout = absl::Seconds(timeout);
  return setup;
}

absl::Status RunOnWorld(const CommSetup& setup,
                        const std::function<absl::Status(comm::ProcessGroup&)>& body) {
  if (setup.backend == "threads")
    return comm::RunThreadsWorld(setup.world_size, body, setup.options);
  DDPKIT_ASSIGN_OR_RETURN(comm::EnvRendezvous env, comm::ReadEnvRendezvous());
  DDPKIT_ASSIGN_OR_RETURN(std::unique_ptr<comm::DistributedWorld> world,
                          comm::DistributedWorld::InitGloo(env, setup.options));
  return body(world->group());
}

}  // namespace ddpkit::cli
