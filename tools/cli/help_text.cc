#include "tools/cli/help_text.h"

#include <algorithm>

#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace ddpkit::cli {
namespace {

constexpr size_t kWidth = 96;  // a help line's most characters

bool InTopic(const FlagTopic& topic, const std::string& flag) {
  return std::find(topic.flags.begin(), topic.flags.end(), flag) != topic.flags.end();
}

// `text` in lines of at most kWidth characters (a longer word stands alone), each indented.
std::string Wrapped(const std::string& text, const std::string& indent) {
  std::string out, line;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!line.empty() && indent.size() + line.size() + 1 + word.size() > kWidth) {
      absl::StrAppend(&out, indent, line, "\n");
      line.clear();
    }
    absl::StrAppend(&line, line.empty() ? "" : " ", word);
  }
  if (!line.empty()) absl::StrAppend(&out, indent, line, "\n");
  return out;
}

// The subcommand whose name opens `segment` ("bench paper: ..." -> "bench"), or "".
std::string NamedSubcommand(absl::string_view segment, const std::vector<std::string>& names) {
  const size_t colon = segment.find(": ");
  if (colon == absl::string_view::npos) return "";
  // "train" or "bench paper" (a subcommand and one of its modes), not "train and join".
  const std::vector<absl::string_view> words = absl::StrSplit(segment.substr(0, colon), ' ');
  if (words.size() > 2 || (words.size() == 2 && (words[1] == "and" || words[1] == "or"))) {
    return "";
  }
  for (const std::string& name : names) {
    if (words[0] == name) return name;
  }
  return "";
}

std::string FlagEntry(const Subcommand& subcommand, const std::string& name,
                      const absl::CommandLineFlag& flag,
                      const std::vector<std::string>& subcommand_names) {
  auto own = subcommand.own_defaults.find(name);
  const std::string value =
      own != subcommand.own_defaults.end() ? own->second : flag.DefaultValue();
  return absl::StrCat("  --", absl::StrReplaceAll(name, {{"_", "-"}}),
                      " (default: ", value.empty() ? "\"\"" : value, ")\n",
                      Wrapped(HelpFor(flag.Help(), subcommand.name, subcommand_names), "      "));
}

}  // namespace

std::string HelpFor(const std::string& help, const std::string& subcommand,
                    const std::vector<std::string>& subcommand_names) {
  std::vector<std::string> segments = absl::StrSplit(help, "; ");
  std::vector<std::string> mine;
  int named = 0;
  for (const std::string& segment : segments) {
    const std::string owner = NamedSubcommand(segment, subcommand_names);
    if (owner.empty()) continue;
    ++named;
    if (owner != subcommand) continue;
    // "bench paper: x" keeps "paper: x" (which of this subcommand's modes); "train: x" keeps "x".
    const std::string rest = segment.substr(owner.size());
    mine.push_back(absl::StartsWith(rest, ": ") ? rest.substr(2) : rest.substr(1));
  }
  if (named < 2 || mine.empty()) return help;
  return absl::StrJoin(mine, "; ");
}

std::string SubcommandHelp(const Subcommand& subcommand,
                           const std::vector<std::string>& subcommand_names,
                           const std::vector<FlagTopic>& topics) {
  std::string usage = Wrapped(absl::StrCat("usage: ", subcommand.usage), "");
  // Continuation lines indented under the subcommand.
  absl::StrReplaceAll({{"\n", "\n    "}}, &usage);
  usage.resize(usage.size() - 4);
  std::string out = absl::StrCat(usage, "\n", subcommand.summary, "\n");
  auto section = [&](const std::string& title, auto&& belongs) {
    std::string entries;
    for (const std::string& name : subcommand.flag_names) {
      if (!belongs(name)) continue;
      const absl::CommandLineFlag* flag = FlagFor(subcommand, name);
      if (flag != nullptr) entries += FlagEntry(subcommand, name, *flag, subcommand_names);
    }
    if (!entries.empty()) absl::StrAppend(&out, "\n", title, ":\n", entries);
  };
  section("flags", [&](const std::string& name) {
    return std::none_of(topics.begin(), topics.end(),
                        [&](const FlagTopic& t) { return InTopic(t, name); });
  });
  for (const FlagTopic& topic : topics) {
    section(topic.title, [&](const std::string& name) { return InTopic(topic, name); });
  }
  return out;
}

}  // namespace ddpkit::cli
