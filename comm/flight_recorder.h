// The flight recorder: each rank's last N collectives (op, sequence number, what for, dtype,
// counts, state, times), printed when a collective fails so a user sees which rank stopped where,
// and written as JSON for `ddpkit fr analyze` (flight_recorder_dump.h).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "comm/types.h"

namespace ddpkit::comm {

class FlightRecorder {
 public:
  enum class State { kQueued, kRunning, kCompleted, kFailed };
  struct Entry {
    uint64_t record_id = 0;  // this recorder's count of entries before this one
    uint64_t sequence_number = 0;
    OpType op = OpType::kBarrier;
    ReduceOp reduce_op = ReduceOp::kSum;  // reductions
    int root = 0;                         // broadcast
    DType dtype = DType::kFloat32;
    int64_t count = 0;         // input elements
    int64_t output_count = 0;  // output elements
    CollectiveTag tag;
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
  Entry* Find(uint64_t sequence_number);  // with mu_ held

  const size_t capacity_;
  mutable std::mutex mu_;
  std::vector<Entry> ring_;  // guarded by mu_; circular once full
  size_t next_ = 0;          // guarded by mu_
  uint64_t recorded_ = 0;    // guarded by mu_: entries ever recorded
};

std::string_view StateName(FlightRecorder::State state);

// "bucket 3", "used_map (shadow)", "" for untagged.
std::string DescribeTag(const CollectiveTag& tag);

}  // namespace ddpkit::comm
