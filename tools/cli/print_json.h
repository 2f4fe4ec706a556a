// Every `--json` report goes out through here: one message, proto3's JSON mapping.
#pragma once

#include <functional>
#include <string>

#include "google/protobuf/message.h"
#include "tools/cli/subcommand.h"

namespace ddpkit::cli {

// A report message as pretty JSON with the field names of its .proto, every field present
// (defaults too), ending in a newline. 64-bit integers are strings, as proto3 maps them.
std::string ReportToJson(const google::protobuf::Message& report);

// ReportToJson(report) on stdout.
void PrintJson(const google::protobuf::Message& report);

// How every job's subcommand ends: a rank other than 0 prints nothing (under gloo each process
// has a report; rank 0's process prints), --json prints the report, otherwise `print_text`.
template <typename Report>
int EmitReport(const Report& report, bool json,
               const std::function<void(const Report&)>& print_text) {
  if (report.rank() != 0) return kExitOk;
  if (json) {
    PrintJson(report);
  } else {
    print_text(report);
  }
  return kExitOk;
}

}  // namespace ddpkit::cli
