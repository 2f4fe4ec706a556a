#include "tools/jobs/simulate/handoff.h"

#include <algorithm>

namespace ddpkit::jobs::sim {

Handoffs MeasureHandoffs(const std::vector<IterationSample>& samples) {
  std::vector<double> per_byte;
  for (const IterationSample& it : samples) {
    const std::vector<AllreduceSample>& a = it.allreduces;
    for (size_t k = 0; k + 1 < a.size(); ++k) {
      const AllreduceSample &done = a[k], &next = a[k + 1];
      const bool queued_before = next.queued_us >= 0 && next.queued_us < done.end_us;
      if (done.bucket == next.bucket || !queued_before || done.bytes <= 0 ||
          done.end_us <= it.backward_end_us) {
        continue;  // within a bucket, nothing waiting, or backward still running beside it
      }
      // From its bucket's completion where the trace has it: a comm hook's work there is the
      // hook's own price (AddHookSamples), not the hand-off.
      const double from = std::max(done.end_us, BucketCompletedUs(it, done));
      per_byte.push_back(std::max(0.0, next.start_us - from) / done.bytes);
    }
  }
  return {.us_per_byte = Median(per_byte), .samples = static_cast<int>(per_byte.size())};
}

}  // namespace ddpkit::jobs::sim
