// Every `--json` report goes out through here: one message, one JSON form (schema versioned).
#pragma once

#include <functional>
#include <string>

#include "google/protobuf/message.h"
#include "tools/cli/subcommand.h"

namespace ddpkit::cli {

// The version of the reports' JSON form. Raise it when a field changes meaning or goes away
// (adding fields keeps it): a CI script checks it before it trusts a field.
//   1: numbers as JSON numbers (64-bit integers too), the first two keys `schema_version` and
//      `report` (the message's name, e.g. "JoinReport"), then the report's fields.
inline constexpr int kReportSchemaVersion = 1;

// A report message as pretty JSON: `schema_version`, `report`, then every field of the .proto
// by its name there, in its order, defaults too (a submessage or `optional` field only when
// set), ending in a newline. Numbers are JSON numbers, 64-bit integers exactly (not strings,
// as proto3's own JSON mapping writes them, which `jq` comparisons and Python trip over);
// enums are their names; NaN and infinities are null.
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
