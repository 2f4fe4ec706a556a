// `ddpkit trace svg`: one iteration (or a few) as a picture. Per rank a compute lane (forward,
// backward, finalize, optimizer; a tick per gradient hook in its bucket's colour) and a
// communication lane (each collective, a bucket's in the bucket's colour; collectives that run
// at once, as on round-robin groups, a row each), with a strip under it: green where
// communication ran while the rank computed, red where it was exposed.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "tools/trace/trace_view.h"

namespace ddpkit::trace {

struct TimelineOptions {
  int first_iteration = 0;  // iterations [first, end) are drawn
  int end_iteration = 3;
  double width = 1200;  // pixels
  // > 0: the time axis is this many milliseconds long, so pictures drawn with the same span
  // and width share one scale; 0: it fits the iterations drawn.
  double span_ms = 0;
};

// How long the iterations drawn last, first phase start to last phase end (0 when none).
double TimelineSpanMs(const TraceView& view, const TimelineOptions& options);

// InvalidArgument when no rank has a phase in the range.
absl::StatusOr<std::string> TimelineSvg(const TraceView& view, const TimelineOptions& options);

}  // namespace ddpkit::trace
