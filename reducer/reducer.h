// The Reducer: averages gradients across ranks while backward is still running, as PyTorch's
// c10d::Reducer. DistributedDataParallel (distributed_data_parallel.h) owns one and drives it;
// docs/reducer.md walks through an iteration.
//
// One synced iteration:
//  1. forward — PrepareForForward counts the iteration; EnsurePriorReductionFinished and
//     RebuildBuckets (once, after the first synced iteration) run before the module;
//     PrepareForBackward arms the hooks and resets every bucket's pending counter;
//  2. backward — each parameter's gradient accumulator calls AutogradHook(index) once its
//     gradient is final. MarkVariableReady copies grad/world into the parameter's bucket view;
//     when a bucket's pending counter reaches 0 MarkBucketReady launches its allreduce — strictly
//     in bucket order — on the process group's thread, while backward goes on;
//  3. when the last bucket has been launched a callback is queued on the engine; at the end of
//     backward it runs FinalizeBackward: wait for every bucket, write the averaged values back
//     into .grad.
//
// Under no_sync the hooks are not armed: gradients only accumulate locally.
//
// Threading: the reducer belongs to its rank's thread (forward, backward and every hook run
// there); the communication thread only works on bucket buffers between their launch and
// FinalizeBackward's wait. Misuse (a parameter ready twice, an unfinished reduction, a changed
// static graph) throws ddpkit::Error naming the parameter; a failed collective throws with the
// process group's diagnosis.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autograd/accumulate_grad.h"
#include "autograd/nn/nn.h"
#include "comm/process_group.h"
#include "reducer/bucket.h"
#include "reducer/bucket_assignment.h"
#include "reducer/comm_hook.h"
#include "reducer/ddp_logging.pb.h"
#include "reducer/pytorch_version.h"
#include "reducer/reducer_logging.h"
#include "reducer/static_graph_record.h"
#include "reducer/trace.h"

namespace ddpkit::reducer {

// A comm hook that compresses reports what it sent: the logging data's `compression`, read after
// every synced backward (on the rank's thread, every bucket's future complete).
using CommHookStats = std::function<CompressionStats()>;

struct ReducerOptions {
  BucketLimits limits;  // the rebuilt plan's [first bucket, cap], or a cap per bucket
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
  bool skip_all_reduce_unused_params = false;  // ddp_options.h says what these two do
  bool batched_grad_copy = false;
  // Whose static graph: 1.13 counts its first iteration from the first synced forward, 2.1 on
  // from the first backward (DdpRule::kStaticGraphCountsBackwards).
  PyTorchVersion pytorch_version = kDefaultPyTorch;
};

class Reducer {
 public:
  // `parameters`: the deduplicated parameters with their names; index i is "variable i"
  // everywhere. `initial`: the bucket assignment to start with, in reduction order.
  Reducer(NamedTensors parameters, const BucketAssignment& initial, comm::ProcessGroup& group,
          ReducerOptions options);
  ~Reducer();  // removes the gradient hooks
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // --- Configuration (before the first iteration) -----------------------------------------
  void SetStaticGraph();
  void RegisterCommHook(CommHook hook, std::string name, CommHookStats stats = nullptr);
  void SetTraceObserver(TraceObserver* observer) { trace_ = observer; }
  // DDP's forward under no_sync (a trace instant; nothing else to do).
  void NoteNoSyncForward();

  // --- Called by DDP's forward ------------------------------------------------------------
  void PrepareForForward();  // a synced, grad-enabled forward begins
  // Throws when the previous synced backward did not mark every parameter ready.
  void EnsurePriorReductionFinished();
  // Rebuilds the buckets in gradient-arrival order once, after the first synced iteration
  // (static graph: the second), with rank 0's plan broadcast to all. True when it rebuilt.
  bool RebuildBuckets();
  // Starts from `plan` as if the rebuild had already happened (a resumed run: docs/reliability.md
  // "Checkpoints"). Before the first iteration, on every rank alike (no collective); the buckets
  // then stay as they are. FailedPrecondition when this reducer never rebuilds (dynamic
  // find_unused_parameters) or has iterated; InvalidArgument for a plan that does not fit the
  // parameters (CheckBucketAssignment). Either way the reducer is left as it was.
  absl::Status AdoptRebuiltBuckets(const BucketAssignment& plan);
  // The plan the rebuild produced or, once the first synced backward recorded the arrival
  // order, the one the next forward's rebuild will produce (rank 0's is every rank's): what
  // AdoptRebuiltBuckets takes. nullopt before any order was recorded.
  std::optional<BucketAssignment> RebuiltPlan() const;
  // Starts static graph as if its first synced backward had recorded `record` (a resumed run
  // whose checkpoint kept it: static_graph_record.h): the first iteration then reduces bucket by
  // bucket and records the arrival order, as the uninterrupted run's second did. Before the
  // first iteration, on every rank alike (no collective). FailedPrecondition without static
  // graph or once iterating; InvalidArgument for a record that does not fit the parameters
  // (CheckStaticGraphRecord). Either way the reducer is left as it was.
  absl::Status AdoptStaticGraphRecord(const StaticGraphRecord& record);
  // What static graph's first synced backward recorded, this rank's hook counts: what
  // AdoptStaticGraphRecord takes. nullopt without static graph or before that backward.
  std::optional<StaticGraphRecord> StaticGraphRecorded() const;
  // Arms the hooks for this backward. `outputs`: the forward's outputs, searched for unused
  // parameters in dynamic find_unused_parameters mode (ignored otherwise).
  void PrepareForBackward(const TensorList& outputs);
  // Static graph's first synced backward reduces everything at its end (DDP's sink node queues
  // this): the hook counts recorded during it become the expected counts from then on.
  bool static_graph_first_iteration() const {
    if (!static_graph_ || static_graph_recorded_) return false;
    return static_first_is_a_backward_ || num_iterations_ == 1;
  }
  void DelayAllReduce();

  // --- Join (uneven inputs) -----------------------------------------------------------------
  // The forward's count-of-active-ranks allreduce: with `divide_by_initial_world_size` false
  // the gradients are divided by its result instead of the world size.
  void SetJoinCountWork(std::shared_ptr<comm::Work> work, Tensor active_ranks,
                        bool divide_by_initial_world_size);
  // Whether the next forward's RebuildBuckets will rebuild.
  bool rebuild_pending() const { return ShouldRebuildBuckets() && !rebuilt_param_indices_.empty(); }
  // A joined rank shadowing a rebuild: rebuilds too (in parameter order when it recorded no
  // arrival order), adopting rank 0's plan like everyone else.
  void RebuildBucketsForJoin();
  // A joined rank shadowing one synced backward: zeros allreduced (or passed through the comm
  // hook) for every bucket in order, and the used-map allreduce where active ranks issue one.
  // Afterwards this rank's .grad holds what the active ranks' holds.
  // `first_static_iteration`: the active ranks run static graph's first synced backward, which
  // reduces everything at its end, used map first.
  void ShadowBackward(bool first_static_iteration);
  // What the last synced backward divided the gradients by (0 with a comm hook, which does its
  // own math).
  double last_divide_factor() const { return last_divide_factor_; }

  // --- State --------------------------------------------------------------------------------
  const std::vector<Bucket>& buckets() const { return buckets_; }
  const std::vector<VariableLocator>& variable_locators() const { return locators_; }
  const NamedTensors& parameters() const { return params_; }
  int64_t num_iterations() const { return num_iterations_; }
  bool has_rebuilt_buckets() const { return has_rebuilt_buckets_; }
  bool static_graph() const { return static_graph_; }
  comm::ProcessGroup& process_group() const { return group_; }
  // Logging data: construction fields (DDP fills those the reducer does not know) and the
  // runtime ones, updated at every synced iteration.
  DdpLoggingData& logging_data() { return logging_; }
  // The current plan as logged: per bucket its indices, names, bytes, limit and dtype.
  std::vector<BucketInfo> BucketInfos() const;

 private:
  using Clock = std::chrono::steady_clock;

  void InitializeBuckets(const BucketAssignment& assignment);
  void AutogradHook(size_t index);
  void MarkVariableReady(size_t index);
  void MarkBucketReady(size_t bucket_index);
  void CopyDeferredGradients(Bucket& bucket);
  void PlanSkippedBuckets();
  void CheckRanksSkipAlike();
  void LaunchBucket(size_t bucket_index);
  void LaunchLocalUsedMapAllreduce();
  void ShareHookCounts(std::string_view what, bool adopt);
  void UnusedFromHookCounts();
  void FinalizeBackward();
  // The end-of-backward steps finalize and ShadowBackward share.
  void WaitForBucket(size_t bucket_index, std::string_view what);
  void CollectUsedMap(std::string_view what);
  void RecordStaticGraphUnused();
  void FinalizeBucket(Bucket& bucket);
  // Finalize's bookkeeping.
  void LogIteration();
  void ResetAfterBackward();
  void RecordTimes(Clock::time_point comm_end);
  bool GloballyUnused(size_t index);
  void ResetBucketCounting();
  std::vector<size_t> SearchUnusedParameters(const TensorList& outputs) const;
  bool ShouldRebuildBuckets() const {
    return (static_graph_ || !options_.find_unused_parameters) && !has_rebuilt_buckets_;
  }
  bool dynamic_find_unused() const { return options_.find_unused_parameters && !static_graph_; }
  // Records that `index` got a gradient on this rank (find_unused / static graph's first pass).
  void RecordLocalUse(size_t index);
  void SyncBucketIndices(BucketAssignment& assignment);
  // The rebuild's last steps: lay `assignment` out and log it; no rebuild follows.
  void InstallRebuiltBuckets(const BucketAssignment& assignment);
  // Trace events (trace.h); each does nothing without an observer. An iteration event (forward,
  // rebuild, finalize, ...) names no parameter or bucket; a span passes its `start`.
  void TraceIteration(TraceEventType type, Clock::time_point time = Clock::now(),
                      std::optional<Clock::time_point> start = std::nullopt);
  void TraceHook(size_t param_index);
  void TraceBucket(TraceEventType type, size_t bucket_index, Clock::time_point time = Clock::now());
  void EmitTrace(TraceEvent event);
  std::string ParamName(size_t index) const;
  double DivideFactor();

  NamedTensors params_;
  comm::ProcessGroup& group_;
  const ReducerOptions options_;
  // The release's rules the hooks consult, decided once (reducer/pytorch_version.h).
  const bool static_first_is_a_backward_ =
      Follows(options_.pytorch_version, DdpRule::kStaticGraphCountsBackwards);
  const bool no_sync_use_counts_ = Follows(options_.pytorch_version, DdpRule::kNoSyncRecordsUse);
  std::vector<std::shared_ptr<AccumulateGrad>> grad_accumulators_;
  std::vector<AccumulateGrad::HookHandle> hook_handles_;

  std::vector<Bucket> buckets_;
  std::vector<VariableLocator> locators_;  // by parameter index
  size_t next_bucket_ = 0;                 // the next bucket to launch, in order

  // --- Per synced backward ----------------------------------------------------------------
  bool expect_autograd_hooks_ = false;
  bool require_finalize_ = false;
  bool has_marked_unused_parameters_ = false;
  bool finalize_queued_ = false;
  std::vector<uint8_t> marked_ready_;           // by parameter index
  std::vector<size_t> grad_ready_order_;        // parameter indices, arrival order
  std::vector<size_t> unused_parameters_;       // marked ready at the first hook
  std::vector<size_t> prev_unused_parameters_;  // the last synced iteration's, for the log
  double div_factor_ = 0;                       // 0: not yet chosen this backward
  double last_divide_factor_ = 0;
  int64_t num_buckets_reduced_ = 0;       // this backward's (skip_all_reduce_unused_params)
  std::vector<uint8_t> skipped_buckets_;  // by bucket index: skipped in this backward

  // --- find_unused_parameters / static graph: which parameters got a gradient ---------------
  Tensor local_used_map_;          // int32 [num params], 1 = used on this rank
  Tensor local_used_map_reduced_;  // its allreduced copy (sum over ranks)
  std::shared_ptr<comm::Future> local_used_work_;
  bool local_used_map_reduced_ready_ = false;

  // --- Static graph ---------------------------------------------------------------------------
  bool static_graph_ = false;
  bool static_graph_recorded_ = false;     // its first synced backward is done
  std::vector<int> expected_hook_counts_;  // hook firings per parameter in that backward
  std::vector<int> hooks_left_;            // this backward
  std::vector<uint8_t> static_globally_unused_;

  // --- Rebuild ------------------------------------------------------------------------------
  bool has_rebuilt_buckets_ = false;
  std::vector<size_t> rebuilt_param_indices_;  // arrival order of the first synced backward

  // --- Comm hook, trace, logging ----------------------------------------------------------
  CommHook comm_hook_;
  CommHookStats comm_hook_stats_;
  TraceObserver* trace_ = nullptr;
  std::shared_ptr<comm::Work> join_count_work_;  // this forward's, when joined ranks exist
  Tensor join_active_ranks_;
  bool divide_by_initial_world_size_ = true;
  DdpLoggingData logging_;  // reducer_logging.h fills it
  IterationTimer timer_;
  int64_t num_iterations_ = 0;
};

}  // namespace ddpkit::reducer
