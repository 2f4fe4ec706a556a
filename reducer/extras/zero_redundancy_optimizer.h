// ZeroRedundancyOptimizer: ZeRO stage 1, as torch.distributed.optim.ZeroRedundancyOptimizer.
//
// Plain data parallelism keeps the optimizer state (SGD's momentum, Adam's two moments) for
// every parameter on every rank. ZeRO-1 partitions the parameters: each rank owns a shard, keeps
// state only for it and steps only it; after the step every owner broadcasts its shard, so all
// ranks again hold the whole, identical model.
//
//   auto ddp = DistributedDataParallel::Create(model, group).value();
//   auto zero = ZeroRedundancyOptimizer::Create(model->NamedParameters(), group,
//                                               MakeSgdFactory({.lr = 0.1})).value();
//   loss.Backward();  // DDP averages the gradients on every rank
//   zero->Step();     // each rank steps its shard, then broadcasts it
//
// The partition is PyTorch's: parameters by size, largest first, each to the rank owning the
// fewest elements so far (the lowest such rank on ties). Step is a collective.
//
// Under Join (uneven inputs) it is a Joinable: a joined rank's hook keeps stepping its shard
// and broadcasting it, so the active ranks' broadcasts find their partner. Put DDP first in the
// joinable list: its hook leaves the averaged gradient in the joined rank's .grad, which is what
// the shard's step needs. One Step per joined iteration (per DDP forward) is assumed, so do not
// combine it with no_sync accumulation under Join.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "autograd/nn/nn.h"
#include "autograd/nn/optim.h"
#include "comm/process_group.h"
#include "join/join.h"

namespace ddpkit::reducer {

// Builds the optimizer that steps one rank's shard.
using ShardOptimizerFactory = std::function<std::unique_ptr<Optimizer>(TensorList shard)>;
ShardOptimizerFactory MakeSgdFactory(SgdOptions options);

// Which rank owns each parameter (by index), for parameters of `numels` elements on `world`
// ranks.
std::vector<int> PartitionParameters(const std::vector<int64_t>& numels, int world);

class ZeroRedundancyOptimizer final : public Optimizer, public join::Joinable {
 public:
  // Collective. FailedPrecondition (on every rank) when the ranks' parameter lists differ in
  // count or size.
  static absl::StatusOr<std::unique_ptr<ZeroRedundancyOptimizer>> Create(
      NamedTensors parameters, comm::ProcessGroup& group, const ShardOptimizerFactory& factory);

  // Collective: steps this rank's shard, then every owner broadcasts its shard.
  void Step() override;
  // The shard's optimizer's learning rate.
  double lr() const override { return local_->lr(); }
  void set_lr(double lr) override { local_->set_lr(lr); }

  // The parameters this rank steps (and keeps optimizer state for).
  const TensorList& shard() const { return shard_; }
  int64_t shard_elements() const;
  int64_t total_elements() const;

  // This rank's shard's optimizer state, keyed by the index among all parameters (as a plain
  // optimizer over every parameter would key it): each rank returns and restores only its own.
  std::vector<std::pair<std::string, Tensor>> StateTensors() const override;
  // InvalidArgument for a key of a parameter another rank owns (a different world size or
  // model wrote it).
  absl::Status LoadStateTensors(const std::vector<std::pair<std::string, Tensor>>& state) override;

  std::unique_ptr<join::JoinHook> MakeJoinHook() override;
  comm::ProcessGroup& join_process_group() const override { return group_; }

 private:
  friend class ZeroJoinHook;
  ZeroRedundancyOptimizer(NamedTensors parameters, comm::ProcessGroup& group,
                          std::vector<int> owner, const ShardOptimizerFactory& factory);
  void StepShardAndBroadcast();

  NamedTensors named_;
  comm::ProcessGroup& group_;
  std::vector<int> owner_;  // by parameter index
  TensorList shard_;
  std::vector<size_t> shard_indices_;  // shard_[j] is parameter shard_indices_[j]
  std::unique_ptr<Optimizer> local_;
};

}  // namespace ddpkit::reducer
