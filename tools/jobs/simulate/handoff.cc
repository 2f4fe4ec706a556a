#include "tools/jobs/simulate/handoff.h"

#include <algorithm>

namespace ddpkit::jobs::sim {
namespace {

// When bucket `b`'s result was complete on this rank: after a comm hook's work that follows its
// collectives, which the hook's own price covers (AddHookSamples), not the hand-off.
double CompletedUs(const IterationSample& it, const AllreduceSample& a) {
  const bool known = a.bucket >= 0 && static_cast<size_t>(a.bucket) < it.buckets.size() &&
                     it.buckets[a.bucket].reduced_us >= a.end_us;
  return known ? it.buckets[a.bucket].reduced_us : a.end_us;
}

}  // namespace

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
      per_byte.push_back(std::max(0.0, next.start_us - CompletedUs(it, done)) / done.bytes);
    }
  }
  return {.us_per_byte = Median(per_byte), .samples = static_cast<int>(per_byte.size())};
}

}  // namespace ddpkit::jobs::sim
