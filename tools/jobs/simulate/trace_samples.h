// A trace cut into what the simulator measures: per rank and per iteration of a full backward
// pass, its forward and optimizer time, each gradient's ready time, and the bucket allreduces.
// ddpkit's traces and PyTorch's profiler traces (trace/read_traces.h) give the same samples.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/trace/trace_view.h"

namespace ddpkit::jobs::sim {

struct GradientSample {
  int param = -1;   // registration index
  int bucket = -1;  // its bucket in the plan the iteration ran (-1: the trace does not say)
  double ready_us = 0;
};

struct AllreduceSample {
  int bucket = -1;
  double bytes = 0;
  double start_us = 0, end_us = 0;  // start: when the last rank in the view started it
  double rank_start_us = 0;         // when this rank's communication thread started it
  double queued_us = -1;            // when this rank queued it (-1: the trace does not say)
};

// A bucket's two stamps from the reducer: handed to its comm hook (or allreduce), and its
// result complete (the hook's future, so after the hook's work that follows its collectives).
// A comm hook's work runs from the launch to the first collective's queueing, and from the last
// collective's end to the completion. -1: the trace does not say.
struct BucketSample {
  int bucket = -1;
  double launched_us = -1, reduced_us = -1;
};

struct IterationSample {
  int rank = 0, iteration = 0;
  double forward_us = 0, optimizer_us = 0;
  double forward_start_us = -1;  // its first forward's start (-1: none traced)
  // Set by calibrate.cc on each iteration's pace-setting rank: the rank whose own step
  // (forward's start to finalize's end) is the longest — the step as measured — and how much
  // later than that rank this one started: that rank's wait for it, or, negative, how much
  // later that rank started, its step that much shorter.
  double start_skew_us = 0;
  int view_rank = -1;
  double view_finalize_us = -1;  // that rank's finalize work (-1: not traced)
  double view_step_us = -1;      // that rank's step as measured (-1: not traced)
  double backward_start_us = 0, backward_end_us = 0;
  double finalize_end_us = -1;              // -1: the trace has no finalize span for it
  double unused_search_us = 0;              // find_unused_parameters' graph search (inside forward)
  std::vector<GradientSample> gradients;    // in the order they became ready
  std::vector<AllreduceSample> allreduces;  // in start order
  std::vector<BucketSample> buckets;        // by bucket index
};

// The iterations of `view` a step can be learned from: a backward pass with one hook per
// parameter of a model of `params`, after the first two iterations of each DDP (its warm-up:
// the initial plan, then the first iteration on the rebuilt one, whose buckets are new).
// `rank` >= 0 keeps that rank only. InvalidArgument naming `what` when a hook names a parameter
// the model lacks, or when no iteration qualifies.
absl::StatusOr<std::vector<IterationSample>> IterationSamples(const trace::TraceView& view,
                                                              size_t params, int rank,
                                                              const std::string& what);

// When allreduce `a`'s bucket was complete on `it`'s rank (after a comm hook's work that follows
// its collectives); -1 where the trace does not say, or says so before `a` ended.
double BucketCompletedUs(const IterationSample& it, const AllreduceSample& a);

// The median of the finite ones (of an even count, the mean of the middle two, as Python's
// statistics.median and the validation's measured steps take it; 0 for none).
double Median(std::vector<double> values);

// The finite ones' interquartile range over their median (nearest-rank quartiles; 0 for fewer
// than 4 or a median of 0): how much a noisy series varies, its outliers left out.
double Spread(std::vector<double> values);

}  // namespace ddpkit::jobs::sim
