// Any command line, through the parser every subcommand uses (tools/cli/subcommand.h) into
// flags of each numeric type ddpkit has (--steps, --batch-size, --lr, --seed, ...): the flags
// set, or an InvalidArgument, never a crash. Arguments are the input split at NUL bytes.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "tools/cli/subcommand.h"

// The shared job flags' names and types (tools/cli/job_flags.cc, comm_flags.cc).
ABSL_FLAG(int32_t, steps, 60, "");
ABSL_FLAG(int32_t, batch_size, 32, "");
ABSL_FLAG(int32_t, world_size, 4, "");
ABSL_FLAG(double, lr, 0.1, "");
ABSL_FLAG(double, bucket_cap_mb, 25, "");
ABSL_FLAG(uint64_t, seed, 0, "");
ABSL_FLAG(bool, json, false, "");
ABSL_FLAG(std::string, model, "mlp:32,64,64,10", "");

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ddpkit::cli::Subcommand subcommand{
      .name = "fuzz",
      .flag_names = {"steps", "batch_size", "world_size", "lr", "bucket_cap_mb", "seed", "json",
                     "model"},
      .takes_positionals = (size % 2) == 0};
  std::vector<std::string> args(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      args.emplace_back();
    } else {
      args.back().push_back(static_cast<char>(data[i]));
    }
  }
  std::vector<std::string> positionals;
  bool help = false;
  (void)ddpkit::cli::ParseFlags(subcommand, args, positionals, help);
  return 0;
}
