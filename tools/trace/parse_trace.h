// Reading a ddpkit trace file back (trace_file.h writes it) into the view `ddpkit trace
// stats|svg|merge` and `simulate --calibrate` use. Its own file because these bytes come from
// outside: it needs no reducer, so tests/fuzz/ddpkit_trace_fuzz.cc can feed it anything.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "tools/trace/trace_view.h"

namespace ddpkit::trace {

// Parses a trace written by WriteTraceFile (one rank's or every rank's). InvalidArgument naming
// the file for anything else, of one line.
absl::StatusOr<TraceView> ReadTraceFile(const std::string& path);
// The file's JSON as written, after checking it is a ddpkit trace (for merging files whole).
absl::StatusOr<nlohmann::json> ReadTraceJson(const std::string& path);
// `what` names the trace in errors. Every span and instant of an accepted view has finite times
// that do not run backwards.
absl::StatusOr<TraceView> ParseTrace(const nlohmann::json& json, const std::string& what);

}  // namespace ddpkit::trace
