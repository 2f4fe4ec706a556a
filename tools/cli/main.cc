// build/bin/ddpkit — the one binary; see `ddpkit --help`.
#include "tools/cli/commands.h"

int main(int argc, char** argv) {
  return ddpkit::cli::Main(
      argc, argv,
      {ddpkit::cli::TrainSubcommand(), ddpkit::cli::BucketsSubcommand(),
       ddpkit::cli::JoinSubcommand(), ddpkit::cli::ContrastiveSubcommand(),
       ddpkit::cli::LaunchSubcommand(), ddpkit::cli::BenchSubcommand(),
       ddpkit::cli::TraceSubcommand(), ddpkit::cli::FrSubcommand(), ddpkit::cli::ChaosSubcommand(),
       ddpkit::cli::RecomputeSubcommand(), ddpkit::cli::VarlenSubcommand(),
       ddpkit::cli::SimulateSubcommand(), ddpkit::cli::RelaySubcommand()},
      ddpkit::cli::FlagTopics());
}
