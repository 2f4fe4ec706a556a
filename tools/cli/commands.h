// The subcommands `ddpkit` offers; each is defined in tools/cli/<name>_command.cc.
#pragma once

#include "tools/cli/subcommand.h"

namespace ddpkit::cli {

Subcommand TrainSubcommand();
Subcommand BucketsSubcommand();
Subcommand JoinSubcommand();
Subcommand ContrastiveSubcommand();
Subcommand LaunchSubcommand();
Subcommand BenchSubcommand();
Subcommand TraceSubcommand();
Subcommand FrSubcommand();
Subcommand ChaosSubcommand();
Subcommand RecomputeSubcommand();
Subcommand VarlenSubcommand();
Subcommand SimulateSubcommand();
Subcommand RelaySubcommand();

}  // namespace ddpkit::cli
