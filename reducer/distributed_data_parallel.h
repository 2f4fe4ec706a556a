// DistributedDataParallel: wraps a module so that, after backward, every rank holds the
// gradients averaged over all ranks — as if one process had run the whole global batch.
//
//   auto ddp = DistributedDataParallel::Create(model, group, {.find_unused_parameters = true});
//   Tensor loss = CrossEntropy((*ddp)->Forward(x), y);
//   loss.Backward();         // buckets are allreduced while backward runs
//   optimizer.Step();        // .grad holds the average over all ranks
//
// Construction checks that every rank wraps the same model (count, shapes and dtypes of the
// parameters) and copies rank 0's parameters and buffers to all. Parameter names in errors and
// logs are the wrapped module's own ("0.weight").
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "autograd/nn/nn.h"
#include "comm/process_group.h"
#include "join/join.h"
#include "reducer/ddp_options.h"
#include "reducer/reducer.h"

namespace ddpkit::reducer {

class DistributedDataParallel : public nn::Module, public join::Joinable {
 public:
  // Collective: every rank of `group` must call it. InvalidArgument for bad options or a
  // module without trainable parameters; FailedPrecondition when the ranks' models differ.
  static absl::StatusOr<std::shared_ptr<DistributedDataParallel>> Create(
      std::shared_ptr<nn::Module> module, comm::ProcessGroup& group, DdpOptions options = {});

  Tensor Forward(const Tensor& input) override;
  // Passed to the wrapped module (its control flow), as DDP passes forward's arguments on.
  void SetForwardContext(const nn::ForwardContext& context) override {
    module_->SetForwardContext(context);
  }

  // Gradient accumulation without communication: forwards (and their backwards) inside the
  // guard's scope only accumulate into .grad locally; the first synced backward after it
  // averages the accumulated sums.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp)
        : ddp_(ddp), previous_(ddp.require_backward_grad_sync_) {
      ddp.require_backward_grad_sync_ = false;
    }
    ~NoSyncGuard() { ddp_.require_backward_grad_sync_ = previous_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSyncGuard NoSync() { return NoSyncGuard(*this); }

  // Once, before the first iteration. `stats`: what a compressing hook sent (logging data).
  void RegisterCommHook(CommHook hook, std::string name, CommHookStats stats = nullptr);
  void RegisterBuiltinCommHook(BuiltinCommHook hook);

  // --- Join (uneven inputs; see join/join.h and docs/join.md) ------------------------------
  // true (default): gradients are always divided by the world size, joined ranks contributing
  // zeros; false: divided by the number of ranks still active in the iteration.
  void set_divide_by_initial_world_size(bool value) { divide_by_initial_world_size_ = value; }
  std::unique_ptr<join::JoinHook> MakeJoinHook() override;
  comm::ProcessGroup& join_process_group() const override { return group_; }
  // The rank whose model every rank took at the end of Join (-1 before).
  int authoritative_rank() const { return authoritative_rank_; }

  nn::Module& module() const { return *module_; }
  Reducer& reducer() const { return *reducer_; }
  const DdpOptions& options() const { return options_; }
  comm::ProcessGroup& process_group() const { return group_; }
  const DdpLoggingData& LoggingData() const { return reducer_->logging_data(); }

 private:
  DistributedDataParallel(std::shared_ptr<nn::Module> module, comm::ProcessGroup& group,
                          DdpOptions options);
  std::string Describe() const override { return "DistributedDataParallel"; }
  // Rank `root`'s buffers to every rank: 0, or under Join the highest active rank.
  void SyncBuffers(int root);

  std::shared_ptr<nn::Module> module_;
  comm::ProcessGroup& group_;
  DdpOptions options_;
  std::unique_ptr<Reducer> reducer_;
  friend class DdpJoinHook;
  // Under Join, an active rank tells the joined ones what this iteration will issue: a set of
  // these bits, combined across ranks by AllreduceJoinPlan (see there for why MAX is right),
  // with the sender's rank above them.
  static constexpr int64_t kSync = 1, kStaticFirst = 2, kRebuild = 4, kBuffers = 8;
  static constexpr int kRankShift = 8;
  int64_t AllreduceJoinPlan(int64_t plan);

  bool require_backward_grad_sync_ = true;
  bool require_forward_param_sync_ = true;
  bool divide_by_initial_world_size_ = true;
  int authoritative_rank_ = -1;
};

// The initial assignment DDP uses for `parameters` (already in reduction order: the sorted
// assignment reversed), under BucketCapsOf(options).initial: one bucket per dtype when
// find_unused is off or the graph is static, otherwise limits [first bucket, cap] (a cap list:
// the list). The rebuilt one is RebuiltBucketAssignment
// (bucket_assignment.h), which the reducer computes after the first synced iteration.
BucketAssignment InitialBucketAssignment(const std::vector<BucketTensorSpec>& parameters,
                                         const DdpOptions& options);

}  // namespace ddpkit::reducer
