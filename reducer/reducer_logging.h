// The reducer's bookkeeping for observers, kept out of the algorithm in reducer.cc: the DDP
// logging data (reducer/ddp_logging.proto; PyTorch's DDPLoggingData) and the timing of each
// synced iteration. The Reducer calls these at fixed points; nothing here changes what it does.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "autograd/nn/nn.h"
#include "comm/process_group.h"
#include "reducer/bucket.h"
#include "reducer/bucket_assignment.h"
#include "reducer/ddp_logging.pb.h"

namespace ddpkit::reducer {

// Per bucket: its parameters' indices and names, bytes, limit and dtype.
std::vector<BucketInfo> BucketInfosOf(const std::vector<Bucket>& buckets,
                                      const NamedTensors& params);

struct ReducerOptions;  // reducer.h

// The construction fields the reducer knows (DDP fills the rest): the world, the options, the
// parameters and the initial buckets. With debug logging on, the plan is also logged.
void LogConstruction(DdpLoggingData& logging, const comm::ProcessGroup& group,
                     const NamedTensors& params, const ReducerOptions& options,
                     const std::vector<Bucket>& buckets, const BucketAssignment& initial);

// A synced forward starts; `num_iterations` counts it. Sets `iteration` and PyTorch's sampled
// pytorch.iteration (reducer/ddp_logging.proto).
// `buckets_reduced`: whether the PyTorch followed logs num_buckets_reduced (2.8 on).
void LogForward(DdpLoggingData& logging, int64_t num_iterations, bool buckets_reduced);

// With find_unused_parameters, this synced backward's unused parameters (ascending, this
// rank's graph search): can_set_static_graph turns false, for good, once the set differs from
// the previous iteration's (PyTorch's Reducer::search_unused_parameters). `previous` is
// updated.
void LogUnusedSet(DdpLoggingData& logging, std::vector<size_t>& previous,
                  const std::vector<size_t>& unused, int64_t num_iterations);

// The rebuilt plan: the logging data's rebuilt_buckets, and an info line with debug logging on.
void LogRebuild(DdpLoggingData& logging, const comm::ProcessGroup& group,
                const NamedTensors& params, const std::vector<Bucket>& buckets,
                const BucketAssignment& rebuilt);

// One synced backward's usage: the parameters no rank used (`globally_unused`, asked only when
// `track_unused`) and the order gradients arrived in.
void LogIterationUsage(DdpLoggingData& logging, const NamedTensors& params, bool track_unused,
                       absl::FunctionRef<bool(size_t)> globally_unused,
                       const std::vector<size_t>& grad_ready_order);

// The times a synced iteration is split into, as running totals; Record writes their averages
// into the logging data (avg_forward_compute_time, ...). Marks are taken on the rank's thread.
class IterationTimer {
 public:
  using Clock = std::chrono::steady_clock;

  void StartForward(Clock::time_point t) { forward_start_ = t; }
  void StartBackward(Clock::time_point t) { backward_start_ = t; }
  void EndCompute(Clock::time_point t) { compute_end_ = t; }
  // The first launch of a backward starts its communication time; ClearLaunches forgets it.
  void NoteLaunch(Clock::time_point t) {
    if (!launched_) comm_start_ = t, launched_ = true;
  }
  void ClearLaunches() { launched_ = false; }
  Clock::time_point compute_end() const { return compute_end_; }
  Clock::time_point comm_start() const { return comm_start_; }

  // Adds the iteration whose last reduction completed at `comm_end` and whose finalize ended at
  // `finalize_end`. With detail debug logging, logs the averages.
  void Record(Clock::time_point comm_end, Clock::time_point finalize_end, DdpLoggingData& logging,
              bool log_detail);

 private:
  Clock::time_point forward_start_{}, backward_start_{}, compute_end_{}, comm_start_{};
  bool launched_ = false;
  struct Totals {
    int64_t forward = 0, compute = 0, comm = 0, overlap = 0, exposed = 0, count = 0;
    void Add(const Totals& one);
  } totals_, steady_;  // steady_: from the third synced iteration (steady_averages)
};

}  // namespace ddpkit::reducer
