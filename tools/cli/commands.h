// The subcommands `ddpkit` offers; each is defined in tools/cli/<name>_command.cc.
#pragma once

#include "tools/cli/subcommand.h"

namespace ddpkit::cli {

// --help's headings (flag_topics.cc).
std::vector<FlagTopic> FlagTopics();

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
