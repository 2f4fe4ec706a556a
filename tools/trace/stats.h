// `ddpkit trace stats`: what a trace says about overlap, per iteration and rank and in total,
// with the definitions of Holistic Trace Analysis (overlap = time computation and communication
// both run ÷ communication time) and, beside them, DDP's logging-data figures recomputed from
// the same trace so the two can be checked against each other. docs/inspect.md defines each.
#pragma once

#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/trace/trace_report.pb.h"
#include "tools/trace/trace_view.h"

namespace ddpkit::trace {

TraceStatsReport ComputeTraceStats(const TraceView& view);

// Interval arithmetic on [start, end) spans, exposed for tests.
using Intervals = std::vector<std::pair<double, double>>;
Intervals MergeIntervals(Intervals spans);                     // sorted, disjoint
double TotalLength(const Intervals& merged);                   // of merged intervals
double OverlapLength(const Intervals& a, const Intervals& b);  // both merged

}  // namespace ddpkit::trace
