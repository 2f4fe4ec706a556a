// The hand-off between two buckets' collectives once backward is over: how long after one ends
// the next, queued already, starts, per byte of the one that ended (SimModel::handoff_us_per_byte).
// On 2 mpi ranks, each bound to its core, the next collective started 0.29-0.36 ms after a
// 4.24 MB one and 0.83 ms after an 8.44 MB one: the rank's finalize copies the finished bucket
// out of its buffer on the core the communication thread needs (with gradient_as_bucket_view,
// which copies nothing, 0.02 ms; gloo's unbound ranks: 0.01 ms). A simulated stream that starts
// the next one at once priced those runs' steps that much short.
#pragma once

#include <vector>

#include "tools/jobs/simulate/trace_samples.h"

namespace ddpkit::jobs::sim {

struct Handoffs {
  double us_per_byte = 0;  // the median of the samples' gap per byte (0: none)
  int samples = 0;
};

// From every rank's iterations: each bucket's last collective that ended after its rank's
// backward, followed by another bucket's collective queued before it ended; the gap from its end
// (or its bucket's completion, after a comm hook's work there) to the next one's start.
Handoffs MeasureHandoffs(const std::vector<IterationSample>& samples);

}  // namespace ddpkit::jobs::sim
