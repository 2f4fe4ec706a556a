// The `ddpkit` command line: one binary, one subcommand per job.
//
// Flags are ordinary Abseil flags (ABSL_FLAG in the subcommand's .cc), but each subcommand
// declares which ones it accepts and parsing never exits the process: an unknown flag, a flag
// another subcommand owns, or a bad value is reported as one line and exit status 2. Flags are
// written with dashes on the command line (--batch-size) and underscores in C++ (batch_size).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/status/status.h"

namespace ddpkit::cli {

// Exit statuses shared by every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the job ran and failed
inline constexpr int kExitUsage = 2;    // the command line was wrong
// --check: the job ran to its end and a verdict it was asked to check failed (models differ
// across ranks, DDP differs from one process). `ddpkit launch` passes it on when the failing
// rank's. docs/join.md ("In CI") has the table.
inline constexpr int kExitCheckFailed = 3;

struct Subcommand {
  std::string name;
  std::string summary;                  // one line for `ddpkit --help`
  std::string usage;                    // e.g. "ddpkit train [flags]"
  std::vector<std::string> flag_names;  // Abseil names (underscores)
  // Shared flags whose default this subcommand replaces (it reads them with
  // FlagDiffersFromDefault): name -> the default --help shows.
  std::map<std::string, std::string> own_defaults = {};
  // Names in flag_names this subcommand reads into another Abseil flag: name -> that flag (a
  // shared name with its own type here, e.g. simulate's list-valued --world-size).
  std::map<std::string, std::string> flag_aliases = {};
  bool takes_positionals = false;  // non-flag arguments, and everything after "--"
  // Runs with flags already parsed; returns the exit status.
  std::function<int(const std::vector<std::string>& positionals)> run;
};

// Sets the named flags from `args` ("--name=value", "--name value", and for booleans "--name",
// "--noname" and "--name true|false"). Non-flag arguments, and everything after "--" verbatim,
// go to `positionals` when the subcommand takes them. `help` is set by --help / -h.
absl::Status ParseFlags(const Subcommand& subcommand, const std::vector<std::string>& args,
                        std::vector<std::string>& positionals, bool& help);

// The Abseil flag `name` sets for this subcommand, through its flag_aliases (nullptr when it
// accepts no such flag).
absl::CommandLineFlag* FlagFor(const Subcommand& subcommand, const std::string& name);

// Whether the command line set the named flag (to any value, its default's too).
bool FlagGiven(std::string_view name);

// Whether the named flag holds something other than its default (a subcommand that wants its
// own default for a shared flag uses this; a flag set to its default value reads as unset).
bool FlagDiffersFromDefault(std::string_view name);

// Prints "ddpkit <subcommand>: <message>" on stderr and returns the exit status for it:
// kExitUsage for InvalidArgument (the command line was wrong), kExitFailure otherwise.
int Fail(std::string_view subcommand, const absl::Status& status);

// The entry point: picks the subcommand named by argv[1] and runs it.
// A heading of `--help` and the flags under it (tools/cli/flag_topics.cc has ddpkit's).
struct FlagTopic {
  std::string title;
  std::vector<std::string> flags;  // Abseil names
};

int Main(int argc, char** argv, const std::vector<Subcommand>& subcommands,
         const std::vector<FlagTopic>& topics = {});

}  // namespace ddpkit::cli
