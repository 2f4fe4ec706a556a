#include "tools/trace/clock_sync.h"

#include <limits>
#include <random>

namespace ddpkit::trace {
namespace {

constexpr int kRounds = 8;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(TraceClock::now().time_since_epoch())
      .count();
}

uint64_t RandomJobId() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

}  // namespace

JobClock LocalClock() { return {.epoch = TraceClock::now(), .job_id = RandomJobId()}; }

absl::StatusOr<JobClock> AlignClocks(comm::ProcessGroup& group) {
  comm::ScopedCollectiveTag tag({.purpose = "clock_sync"});
  const bool root = group.rank() == 0;
  const int64_t epoch0 = root ? NowNs() : 0;  // rank 0's time 0, on its clock
  const uint64_t job_id = root ? RandomJobId() : 0;
  JobClock clock{.uncertainty_ns = std::numeric_limits<int64_t>::max()};
  Tensor message = Tensor::Zeros({3}, DType::kInt64);
  Tensor joined = Tensor::Zeros({1}, DType::kInt64);
  for (int round = 0; round < kRounds; ++round) {
    DDPKIT_RETURN_IF_ERROR(group.Barrier()->Wait());
    const int64_t before = NowNs();
    // Rank 0 reads its clock only once every rank has joined this allreduce, so after each
    // rank's `before`; and each rank gets the reading after it was taken. Leaving a barrier
    // gives no such order: a rank scheduled late could see an old reading with a short trip.
    DDPKIT_RETURN_IF_ERROR(group.Allreduce(joined)->Wait());
    int64_t* m = message.data<int64_t>();
    if (root) m[0] = NowNs(), m[1] = epoch0, m[2] = static_cast<int64_t>(job_id);
    DDPKIT_RETURN_IF_ERROR(group.Broadcast(message, 0)->Wait());
    const int64_t after = NowNs();
    // Rank 0 read its clock somewhere between `before` and `after` of ours: assume the middle.
    const int64_t half_trip = (after - before) / 2;
    if (half_trip < clock.uncertainty_ns) {
      clock.uncertainty_ns = half_trip;
      clock.offset_ns = root ? 0 : m[0] - (before + half_trip);
    }
  }
  const int64_t* m = message.data<int64_t>();
  clock.job_id = static_cast<uint64_t>(m[2]);
  if (root) clock.uncertainty_ns = 0;
  // Rank 0's epoch, expressed on this process's clock.
  clock.epoch = TraceClock::time_point(std::chrono::nanoseconds(m[1] - clock.offset_ns));
  return clock;
}

}  // namespace ddpkit::trace
