#include "reducer/extras/zero_redundancy_optimizer.h"

#include <algorithm>
#include <charconv>
#include <numeric>
#include <optional>

#include "autograd/base/error.h"
#include "autograd/grad_mode.h"
#include "reducer/reducer_errors.h"

namespace ddpkit::reducer {

ShardOptimizerFactory MakeSgdFactory(SgdOptions options) {
  return [options](TensorList shard) -> std::unique_ptr<Optimizer> {
    return std::make_unique<Sgd>(std::move(shard), options);
  };
}

std::vector<int> PartitionParameters(const std::vector<int64_t>& numels, int world) {
  std::vector<size_t> by_size(numels.size());
  std::iota(by_size.begin(), by_size.end(), 0);
  std::stable_sort(by_size.begin(), by_size.end(),
                   [&](size_t a, size_t b) { return numels[a] > numels[b]; });
  std::vector<int64_t> owned(world, 0);
  std::vector<int> owner(numels.size(), 0);
  for (size_t index : by_size) {
    const int rank = static_cast<int>(std::min_element(owned.begin(), owned.end()) - owned.begin());
    owner[index] = rank;
    owned[rank] += numels[index];
  }
  return owner;
}

absl::StatusOr<std::unique_ptr<ZeroRedundancyOptimizer>> ZeroRedundancyOptimizer::Create(
    NamedTensors parameters, comm::ProcessGroup& group, const ShardOptimizerFactory& factory) {
  if (parameters.empty()) return absl::InvalidArgumentError("[zero] no parameters to optimize");
  std::vector<int64_t> numels;
  int64_t total = 0;
  for (const auto& [name, p] : parameters) {
    numels.push_back(p.numel());
    total += p.numel();
  }
  // Every rank must partition the same list: compare (count, total size) through MAX of the
  // values and of their negations, so every rank reaches the same verdict.
  const int64_t count = static_cast<int64_t>(parameters.size());
  Tensor check = Tensor::Zeros({4}, DType::kInt64);
  int64_t* c = check.data<int64_t>();
  c[0] = count, c[1] = -count, c[2] = total, c[3] = -total;
  comm::ScopedCollectiveTag tag({.purpose = "model_check"});
  if (absl::Status s = group.Allreduce(check, comm::ReduceOp::kMax)->Wait(); !s.ok()) {
    return CommFailure(group.rank(), "comparing the parameter lists", s, "zero");
  }
  if (c[0] != -c[1] || c[2] != -c[3]) {
    return absl::FailedPreconditionError(StrCat(
        "[zero] rank ", group.rank(), ": the ranks' parameter lists differ (counts ", -c[1], "..",
        c[0], ", total elements ", -c[3], "..", c[2], "; this rank has ", count, " and ", total,
        "); every rank must build the same model before creating the optimizer"));
  }
  std::vector<int> owner = PartitionParameters(numels, group.size());
  return std::unique_ptr<ZeroRedundancyOptimizer>(
      new ZeroRedundancyOptimizer(std::move(parameters), group, std::move(owner), factory));
}

namespace {
TensorList AllOf(const NamedTensors& named) {
  TensorList all;
  for (const auto& [name, p] : named) all.push_back(p);
  return all;
}
}  // namespace

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(NamedTensors parameters, comm::ProcessGroup& group,
                                                 std::vector<int> owner,
                                                 const ShardOptimizerFactory& factory)
    : Optimizer(AllOf(parameters)),
      named_(std::move(parameters)),
      group_(group),
      owner_(std::move(owner)) {
  for (size_t i = 0; i < named_.size(); ++i) {
    if (owner_[i] != group_.rank()) continue;
    shard_.push_back(named_[i].second);
    shard_indices_.push_back(i);
  }
  local_ = factory(shard_);
}

int64_t ZeroRedundancyOptimizer::shard_elements() const {
  int64_t n = 0;
  for (const Tensor& p : shard_) n += p.numel();
  return n;
}

int64_t ZeroRedundancyOptimizer::total_elements() const {
  int64_t n = 0;
  for (const auto& [name, p] : named_) n += p.numel();
  return n;
}

namespace {
// "<index>.<name>" with the index mapped through `map`; nullopt when it has no image.
std::optional<std::string> Rekey(const std::string& key,
                                 const std::function<int64_t(size_t)>& map) {
  const size_t dot = key.find('.');
  size_t index = 0;
  const auto [ptr, ec] = std::from_chars(key.data(), key.data() + dot, index);
  if (dot == std::string::npos || ec != std::errc() || ptr != key.data() + dot) return std::nullopt;
  const int64_t mapped = map(index);
  if (mapped < 0) return std::nullopt;
  return StrCat(mapped, key.substr(dot));
}
}  // namespace

std::vector<std::pair<std::string, Tensor>> ZeroRedundancyOptimizer::StateTensors() const {
  std::vector<std::pair<std::string, Tensor>> state = local_->StateTensors();
  for (auto& [key, tensor] : state) {
    key = *Rekey(key, [&](size_t j) { return static_cast<int64_t>(shard_indices_[j]); });
  }
  return state;
}

absl::Status ZeroRedundancyOptimizer::LoadStateTensors(
    const std::vector<std::pair<std::string, Tensor>>& state) {
  std::vector<std::pair<std::string, Tensor>> local;
  for (const auto& [key, tensor] : state) {
    std::optional<std::string> local_key = Rekey(key, [&](size_t i) -> int64_t {
      const auto it = std::find(shard_indices_.begin(), shard_indices_.end(), i);
      return it == shard_indices_.end() ? -1 : it - shard_indices_.begin();
    });
    if (!local_key) {
      return absl::InvalidArgumentError(
          StrCat("[zero] rank ", group_.rank(), ": state '", key,
                 "' is not for a parameter of this rank's shard; was it saved with another "
                 "world size or model?"));
    }
    local.emplace_back(*std::move(local_key), tensor);
  }
  return local_->LoadStateTensors(local);
}

void ZeroRedundancyOptimizer::Step() {
  // Only matters when this optimizer is the first joinable (no DDP in the Join).
  Tensor active_ranks;
  std::shared_ptr<comm::Work> count = join::Join::NotifyJoinContext(*this, &active_ranks);
  StepShardAndBroadcast();
  if (count) {
    if (absl::Status s = count->Wait(); !s.ok())
      ThrowCommFailure(group_.rank(), "counting the active ranks", s, "zero");
  }
}

void ZeroRedundancyOptimizer::StepShardAndBroadcast() {
  comm::ScopedCollectiveTag tag({.purpose = "zero_shard"});
  if (!shard_.empty()) local_->Step();
  NoGradGuard no_grad;
  std::vector<std::shared_ptr<comm::Work>> works;
  works.reserve(named_.size());
  for (size_t i = 0; i < named_.size(); ++i) {
    works.push_back(group_.Broadcast(named_[i].second.Detach().Flatten(), owner_[i]));
  }
  for (size_t i = 0; i < named_.size(); ++i) {
    if (absl::Status s = works[i]->Wait(); !s.ok()) {
      ThrowCommFailure(
          group_.rank(),
          StrCat("broadcasting parameter '", named_[i].first, "' from its owner, rank ", owner_[i]),
          s, "zero");
    }
  }
}

// A joined rank keeps stepping the shard it owns (DDP's hook, which runs first, left the
// averaged gradient in .grad) and broadcasting it, matching the active ranks' Step.
class ZeroJoinHook final : public join::JoinHook {
 public:
  explicit ZeroJoinHook(ZeroRedundancyOptimizer& zero) : zero_(zero) {}
  void MainHook() override { zero_.StepShardAndBroadcast(); }

 private:
  ZeroRedundancyOptimizer& zero_;
};

std::unique_ptr<join::JoinHook> ZeroRedundancyOptimizer::MakeJoinHook() {
  return std::make_unique<ZeroJoinHook>(*this);
}

}  // namespace ddpkit::reducer
