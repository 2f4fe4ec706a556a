// The subcommands `ddpkit` offers; each is defined in tools/<name>_command.cc.
#pragma once

#include <string>

#include "google/protobuf/message.h"
#include "tools/cli/subcommand.h"

namespace ddpkit::cli {

Subcommand TrainSubcommand();
Subcommand BucketsSubcommand();
Subcommand JoinSubcommand();
Subcommand ContrastiveSubcommand();
Subcommand LaunchSubcommand();
Subcommand BenchSubcommand();

// A report message as pretty JSON with the field names of its .proto, ending in a newline.
std::string ReportToJson(const google::protobuf::Message& report);

}  // namespace ddpkit::cli
