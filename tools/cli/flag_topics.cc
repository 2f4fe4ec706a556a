// The headings `ddpkit <subcommand> --help` groups its flags under, in order.
#include "tools/cli/check_verdict.h"
#include "tools/cli/comm_flags.h"
#include "tools/cli/commands.h"
#include "tools/cli/ddp_flags.h"

namespace ddpkit::cli {

std::vector<FlagTopic> FlagTopics() {
  std::vector<std::string> world = kCommFlagNames;
  world.push_back("device");
  return {
      {"the world: who runs, where", world},
      {"the model and its data",
       {"model", "weights", "data", "text", "eval_data", "batch_size", "seed", "loss",
        "sync_batchnorm"}},
      {"the training loop", {"steps", "grad_accum", "lr", "momentum", "optimizer"}},
      {"DDP's options, as PyTorch's DistributedDataParallel takes them", kDdpFlagNames},
      {"checkpoints", {"checkpoint_dir", "checkpoint_every", "checkpoint_keep"}},
      {"what it writes", {"json", "trace", "save_weights", "save_grads", "out"}},
      {"checks for CI (exit 3 when one fails)", kCheckFlagNames},
  };
}

}  // namespace ddpkit::cli
