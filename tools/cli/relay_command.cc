// `ddpkit relay --between A,B --delay 10ms`: joins two interfaces, holding every frame `--delay`
// each way (tools/jobs/relay/packet_relay.h). netns_hosts.sh starts one inside the switch's
// namespace for each host brought up with --relay.
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "autograd/base/error.h"
#include "tools/cli/commands.h"
#include "tools/jobs/relay/packet_relay.h"

ABSL_FLAG(std::string, between, "", "the two interfaces to join: A,B");
ABSL_FLAG(absl::Duration, delay, absl::ZeroDuration(), "each frame is held this long, each way");
ABSL_FLAG(std::string, spike, "",
          "EXTRA@AT[/FOR]: frames arriving from AT after the start, for FOR (default EXTRA), are "
          "held EXTRA more, e.g. 2s@3s");
ABSL_FLAG(std::string, control, "",
          "a file holding the delay in ms, read again on SIGUSR1 (netns_hosts.sh fault h1 delay)");

namespace ddpkit::cli {
namespace {

absl::StatusOr<absl::Duration> ParseSpikeTime(const std::string& text) {
  absl::Duration d;
  if (!absl::ParseDuration(text, &d) || d < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(StrCat("--spike: '", text, "' is not a duration >= 0"));
  }
  return d;
}

// "EXTRA@AT[/FOR]" into the config's spike.
absl::Status ParseSpike(const std::string& text, jobs::RelayConfig& config) {
  if (text.empty()) return absl::OkStatus();
  std::vector<std::string> parts = absl::StrSplit(text, absl::ByAnyChar("@/"));
  if (parts.size() < 2 || parts.size() > 3 || text.find('@') == std::string::npos) {
    return absl::InvalidArgumentError(
        StrCat("--spike must be EXTRA@AT or EXTRA@AT/FOR (e.g. 2s@3s), got '", text, "'"));
  }
  DDPKIT_ASSIGN_OR_RETURN(config.spike, ParseSpikeTime(parts[0]));
  DDPKIT_ASSIGN_OR_RETURN(config.spike_at, ParseSpikeTime(parts[1]));
  config.spike_for = config.spike;
  if (parts.size() == 3) {
    DDPKIT_ASSIGN_OR_RETURN(config.spike_for, ParseSpikeTime(parts[2]));
  }
  return absl::OkStatus();
}

absl::StatusOr<jobs::RelayConfig> ConfigFromFlags() {
  jobs::RelayConfig config;
  std::vector<std::string> sides = absl::StrSplit(absl::GetFlag(FLAGS_between), ',');
  if (sides.size() != 2 || sides[0].empty() || sides[1].empty()) {
    return absl::InvalidArgumentError(StrCat("--between must name two interfaces, A,B; got '",
                                             absl::GetFlag(FLAGS_between), "'"));
  }
  config.side_a = sides[0];
  config.side_b = sides[1];
  config.delay = absl::GetFlag(FLAGS_delay);
  if (config.delay < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--delay must be >= 0");
  }
  config.control_file = absl::GetFlag(FLAGS_control);
  DDPKIT_RETURN_IF_ERROR(ParseSpike(absl::GetFlag(FLAGS_spike), config));
  return config;
}

void PrintDirection(const std::string& name, const jobs::RelayDirection& d) {
  std::cout << absl::StrFormat(
      "  %s: %d frames (%d bytes) forwarded, %d dropped (%d queue full, %d the socket's buffer "
      "full: the relay fell behind), %d refused\n",
      name, d.frames, d.bytes, d.dropped + d.socket_dropped, d.dropped, d.socket_dropped,
      d.send_errors);
}

int RunRelayCommand(const std::vector<std::string>&) {
  absl::StatusOr<jobs::RelayConfig> config = ConfigFromFlags();
  if (!config.ok()) return Fail("relay", config.status());
  const std::string between = StrCat(config->side_a, " <-> ", config->side_b);
  absl::StatusOr<jobs::RelayStats> stats = jobs::RunRelay(*config, [&] {
    std::cout << "ddpkit relay: " << between << ", each frame held "
              << absl::FormatDuration(config->delay) << " each way; ready" << std::endl;
  });
  if (!stats.ok()) return Fail("relay", stats.status());
  std::cout << "ddpkit relay: stopped\n";
  PrintDirection(StrCat(config->side_a, " -> ", config->side_b), stats->a_to_b);
  PrintDirection(StrCat(config->side_b, " -> ", config->side_a), stats->b_to_a);
  return kExitOk;
}

}  // namespace

Subcommand RelaySubcommand() {
  return {.name = "relay",
          .summary = "join two interfaces, holding each frame a set time (a link with latency)",
          .usage =
              "ddpkit relay --between A,B [--delay 10ms] [--spike 2s@3s[/FOR]] "
              "[--control FILE]   (root; runs until SIGTERM)",
          .flag_names = {"between", "delay", "spike", "control"},
          .run = RunRelayCommand};
}

}  // namespace ddpkit::cli
