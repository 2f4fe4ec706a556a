// `ddpkit <subcommand> --help`: the usage line, then the subcommand's flags grouped by topic
// (the world, the model and its data, DDP's options, ...), each flag's help wrapped to short
// lines and cut to what concerns this subcommand where one flag serves several.
#pragma once

#include <string>
#include <vector>

#include "tools/cli/subcommand.h"

namespace ddpkit::cli {

// `subcommand_names`: every subcommand's name, to recognise a shared flag's help segment written
// for another one ("contrastive: ...; bench paper: ..."); `topics`: the headings, in order (a
// subcommand's flags in none come first, under "flags").
std::string SubcommandHelp(const Subcommand& subcommand,
                           const std::vector<std::string>& subcommand_names,
                           const std::vector<FlagTopic>& topics);

// The part of a shared flag's help that concerns `subcommand`: of "a: ...; b: ..." segments named
// after subcommands, those of this one (without the name); the whole text otherwise.
std::string HelpFor(const std::string& help, const std::string& subcommand,
                    const std::vector<std::string>& subcommand_names);

}  // namespace ddpkit::cli
