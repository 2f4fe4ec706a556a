// The flight recorder: each rank's last N collectives (op, sequence number, dtype, count, state,
// times), printed when a collective fails so a user sees which rank stopped where.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "comm/types.h"

namespace ddpkit::comm {

class FlightRecorder {
 public:
  enum class State { kQueued, kRunning, kCompleted, kFailed };
  struct Entry {
    uint64_t sequence_number = 0;
    OpType op = OpType::kBarrier;
    DType dtype = DType::kFloat32;
    int64_t count = 0;
    State state = State::kQueued;
    absl::Time queued, started, finished;
  };

  explicit FlightRecorder(size_t capacity = 64) : capacity_(capacity) {}

  void Queued(const Collective& c);
  void Started(uint64_t sequence_number);
  void Finished(uint64_t sequence_number, bool ok);

  // Oldest first.
  std::vector<Entry> Entries() const;
  // A table, one line per entry, newest last.
  std::string Dump() const;

 private:
  Entry* Find(uint64_t sequence_number) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::vector<Entry> ring_ ABSL_GUARDED_BY(mu_);  // circular once full
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
};

std::string_view StateName(FlightRecorder::State state);

}  // namespace ddpkit::comm
