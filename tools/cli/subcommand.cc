#include "tools/cli/subcommand.h"

#include <algorithm>
#include <iostream>
#include <set>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "autograd/base/error.h"
#include "tools/cli/help_text.h"

namespace ddpkit::cli {
namespace {

// The flags this process's command line set (ParseFlags), by Abseil name.
std::set<std::string>& GivenFlags() {
  static std::set<std::string> given;
  return given;
}

std::string Dashed(absl::string_view name) { return absl::StrReplaceAll(name, {{"_", "-"}}); }
std::string Underscored(absl::string_view name) { return absl::StrReplaceAll(name, {{"-", "_"}}); }

bool Accepts(const Subcommand& subcommand, const std::string& name) {
  return std::find(subcommand.flag_names.begin(), subcommand.flag_names.end(), name) !=
         subcommand.flag_names.end();
}

// What a flag of a built-in type takes: said instead of Abseil's own rejection ("Illegal value
// 'abc' specified for flag 'steps'"), which repeats what the caller already prints.
std::string Expected(const absl::CommandLineFlag& flag) {
  if (flag.IsOfType<int>() || flag.IsOfType<int64_t>() || flag.IsOfType<uint64_t>()) {
    return "an integer";
  }
  if (flag.IsOfType<double>() || flag.IsOfType<float>()) return "a number";
  if (flag.IsOfType<bool>()) return "true or false";
  return "";
}

absl::Status UnknownFlag(const Subcommand& subcommand, absl::string_view written) {
  return absl::InvalidArgumentError(StrCat("unknown flag '", written, "' for 'ddpkit ",
                                           subcommand.name, "' (see 'ddpkit ", subcommand.name,
                                           " --help')"));
}

}  // namespace

absl::CommandLineFlag* FlagFor(const Subcommand& subcommand, const std::string& name) {
  if (!Accepts(subcommand, name)) return nullptr;
  auto alias = subcommand.flag_aliases.find(name);
  return absl::FindCommandLineFlag(alias == subcommand.flag_aliases.end() ? name : alias->second);
}

absl::Status ParseFlags(const Subcommand& subcommand, const std::vector<std::string>& args,
                        std::vector<std::string>& positionals, bool& help) {
  help = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      if (!subcommand.takes_positionals) {
        return absl::InvalidArgumentError(
            StrCat("'ddpkit ", subcommand.name, "' takes no arguments after '--'"));
      }
      positionals.insert(positionals.end(), args.begin() + i + 1, args.end());
      return absl::OkStatus();
    }
    if (arg == "--help" || arg == "-h" || arg == "--helpfull") {
      help = true;
      continue;
    }
    if (!absl::StartsWith(arg, "-") || arg == "-") {
      if (!subcommand.takes_positionals) {
        return absl::InvalidArgumentError(StrCat("unexpected argument '", arg, "' for 'ddpkit ",
                                                 subcommand.name, "' (flags start with --)"));
      }
      positionals.push_back(arg);  // flags may follow; only "--" ends flag parsing
      continue;
    }

    // --name=value, --name value, --name, --noname, --name true|false
    absl::string_view body = absl::string_view(arg).substr(absl::StartsWith(arg, "--") ? 2 : 1);
    std::string name = Underscored(body.substr(0, body.find('=')));
    const bool has_value = body.find('=') != absl::string_view::npos;
    std::string value = has_value ? std::string(body.substr(body.find('=') + 1)) : "";
    absl::CommandLineFlag* flag = FlagFor(subcommand, name);
    if (flag == nullptr && !has_value && absl::StartsWith(name, "no")) {
      absl::CommandLineFlag* negated = FlagFor(subcommand, name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>()) {
        flag = negated;
        value = "false";
      }
    }
    if (flag == nullptr) return UnknownFlag(subcommand, arg.substr(0, arg.find('=')));
    if (!has_value && value.empty()) {
      if (flag->IsOfType<bool>()) {
        // "--flag", or "--flag true|false" as a separate word
        const bool next_is_bool =
            i + 1 < args.size() && (args[i + 1] == "true" || args[i + 1] == "false");
        value = next_is_bool ? args[++i] : "true";
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return absl::InvalidArgumentError(StrCat("flag '--", Dashed(name), "' needs a value"));
      }
    }
    GivenFlags().insert(std::string(flag->Name()));
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      if (absl::StartsWith(error, "Illegal value '") && !Expected(*flag).empty()) {
        error = StrCat("expected ", Expected(*flag));
      }
      return absl::InvalidArgumentError(
          StrCat("invalid value '", value, "' for flag '--", Dashed(name), "': ", error));
    }
  }
  return absl::OkStatus();
}

bool FlagGiven(std::string_view name) { return GivenFlags().contains(std::string(name)); }

bool FlagDiffersFromDefault(std::string_view name) {
  const absl::CommandLineFlag* flag =
      absl::FindCommandLineFlag(absl::string_view(name.data(), name.size()));
  return flag != nullptr && flag->CurrentValue() != flag->DefaultValue();
}

int Fail(std::string_view subcommand, const absl::Status& status) {
  std::cerr << "ddpkit " << subcommand << ": " << status.message() << "\n";
  return status.code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
}

int Main(int argc, char** argv, const std::vector<Subcommand>& subcommands,
         const std::vector<FlagTopic>& topics) {
  auto overview = [&] {
    std::string out =
        "ddpkit: a readable PyTorch-DDP-style reducer runtime.\n\nusage: ddpkit <subcommand> "
        "[flags]\n\nsubcommands:\n";
    for (const Subcommand& s : subcommands)
      absl::StrAppend(&out, "  ", s.name, "\t", s.summary, "\n");
    absl::StrAppend(&out, "\n'ddpkit <subcommand> --help' lists a subcommand's flags.\n");
    return out;
  };
  if (argc < 2) {
    std::cerr << overview();
    return kExitUsage;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    std::cout << overview();
    return kExitOk;
  }
  auto it = std::find_if(subcommands.begin(), subcommands.end(),
                         [&](const Subcommand& s) { return s.name == name; });
  if (it == subcommands.end()) {
    std::cerr << "ddpkit: unknown subcommand '" << name << "' (see 'ddpkit --help')\n";
    return kExitUsage;
  }
  std::vector<std::string> args(argv + 2, argv + argc), positionals;
  bool help = false;
  if (absl::Status parsed = ParseFlags(*it, args, positionals, help); !parsed.ok()) {
    std::cerr << "ddpkit " << name << ": " << parsed.message() << "\n";
    return kExitUsage;
  }
  if (help) {
    std::vector<std::string> names;
    for (const Subcommand& s : subcommands) names.push_back(s.name);
    std::cout << SubcommandHelp(*it, names, topics);
    return kExitOk;
  }
  try {
    return it->run(positionals);
  } catch (const Error& e) {  // API misuse surfaced from a library: still one line
    std::cerr << "ddpkit " << name << ": error: " << e.what() << "\n";
    return kExitFailure;
  }
}

}  // namespace ddpkit::cli
