#include "reducer/distributed_data_parallel.h"

#include <algorithm>

#include "absl/strings/str_join.h"
#include "autograd/base/log.h"
#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "reducer/broadcast_coalesced.h"
#include "reducer/reducer_errors.h"

namespace ddpkit::reducer {
namespace {

absl::Status WaitFor(const std::shared_ptr<comm::Work>& work, std::string_view what, int rank) {
  absl::Status status = work->Wait();
  return status.ok() ? status : CommFailure(rank, what, status);
}

// A parameter's signature for the cross-rank check: dtype, rank, up to kMaxDims sizes.
constexpr int kMaxDims = 6;
constexpr int kSignatureWords = 2 + kMaxDims;

std::string SignatureString(const int64_t* words) {
  Shape shape(words + 2, words + 2 + words[1]);
  return StrCat(DTypeName(static_cast<DType>(words[0])), ShapeString(shape));
}

// Every rank must hold the same parameters; otherwise buckets would not line up and the
// allreduces would mix unrelated gradients. Two collectives: the counts (allgather), then
// rank 0's signatures (broadcast), and a last allgather so every rank reports the same error.
absl::Status VerifySameModelOnAllRanks(const NamedTensors& params, comm::ProcessGroup& group) {
  comm::ScopedCollectiveTag tag({.purpose = "model_check"});
  const int world = group.size(), rank = group.rank();
  const int64_t n = static_cast<int64_t>(params.size());
  Tensor count = Tensor::Full({1}, static_cast<double>(n), DType::kInt64);
  Tensor counts = Tensor::Zeros({world}, DType::kInt64);
  DDPKIT_RETURN_IF_ERROR(
      WaitFor(group.Allgather(count, counts), "comparing parameter counts", rank));
  for (int r = 1; r < world; ++r) {
    const int64_t theirs = counts.data<int64_t>()[r], ours = counts.data<int64_t>()[0];
    if (theirs != ours) {
      return absl::FailedPreconditionError(WithPyTorchPhrase(
          StrCat("[ddp] DDP needs the same model on every rank, but rank ", r, " has ", theirs,
                 " parameter tensors while rank 0 has ", ours,
                 ". Build the model identically on every rank (same spec, same code path)."),
          {pytorch_phrase::kDifferentModels}));
    }
  }

  Tensor signatures = Tensor::Zeros({n * kSignatureWords}, DType::kInt64);
  int64_t* sig = signatures.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const Tensor& p = params[i].second;
    if (p.dim() > kMaxDims) {
      return absl::InvalidArgumentError(StrCat("[ddp] parameter ", i, " ('", params[i].first,
                                               "') has ", p.dim(), " dimensions; at most ",
                                               kMaxDims, " are supported"));
    }
    int64_t* w = sig + i * kSignatureWords;
    w[0] = static_cast<int64_t>(p.dtype());
    w[1] = p.dim();
    for (int64_t d = 0; d < p.dim(); ++d) w[2 + d] = p.size(d);
  }
  Tensor mine = signatures.Clone();
  DDPKIT_RETURN_IF_ERROR(
      WaitFor(group.Broadcast(signatures, 0), "comparing parameter shapes", rank));
  int64_t first_mismatch = -1;
  for (int64_t i = 0; i < n * kSignatureWords && first_mismatch < 0; ++i) {
    if (sig[i] != mine.data<int64_t>()[i]) first_mismatch = i / kSignatureWords;
  }
  Tensor mismatch = Tensor::Full({1}, static_cast<double>(first_mismatch), DType::kInt64);
  Tensor mismatches = Tensor::Zeros({world}, DType::kInt64);
  DDPKIT_RETURN_IF_ERROR(
      WaitFor(group.Allgather(mismatch, mismatches), "comparing parameter shapes", rank));
  for (int r = 1; r < world; ++r) {
    const int64_t i = mismatches.data<int64_t>()[r];
    if (i < 0) continue;
    std::string message = StrCat(
        "[ddp] DDP needs the same model on every rank, but parameter ", i, " ('", params[i].first,
        "') is ", SignatureString(sig + i * kSignatureWords), " on rank 0 and differs on rank ", r);
    if (r == rank) {
      StrAppend(&message, ", where it is ",
                SignatureString(mine.data<int64_t>() + i * kSignatureWords));
    }
    StrAppend(&message, ". Build the model identically on every rank.");
    return absl::FailedPreconditionError(
        WithPyTorchPhrase(std::move(message), {pytorch_phrase::kDifferentModels}));
  }
  return absl::OkStatus();
}

// Rank `root`'s values to every rank, in place, in 250 MiB buckets as PyTorch's
// _sync_module_states and _sync_buffers.
absl::Status BroadcastFromRank(const NamedTensors& tensors, comm::ProcessGroup& group,
                               std::string_view kind, int root = 0) {
  comm::ScopedCollectiveTag tag(
      {.purpose = kind == "buffer" ? "buffer_broadcast" : "model_broadcast"});
  return BroadcastCoalesced(tensors, group, root, kind);
}

// Static graph's first backward: an identity node on the output whose backward — the first
// node of the outer backward pass — queues the reducer's DelayAllReduce, so it runs after
// every hook, including those of nested (checkpointed) passes.
Tensor AttachDelayAllReduce(const Tensor& output, Reducer* reducer) {
  Tensor sink = output.Detach();
  RecordOp(sink, "DdpSinkBackward", {&output}, [reducer](const Tensor& g) -> TensorList {
    Engine::QueueCallback([reducer] { reducer->DelayAllReduce(); });
    return {g};
  });
  return sink;
}

// From PyTorch 2.1 static graph's first iteration is its first backward, even one under no_sync:
// 2.1 to 2.15 then reduce everything from inside no_sync and fail at the end of that backward
// (an internal assert on expect_autograd_hooks_, then "Expected to have finished reduction" at
// every later forward). ddpkit stops there too, saying why and what to do.
Tensor AttachNoSyncFirstBackwardFailure(const Tensor& output, int rank, PyTorchVersion version) {
  Tensor sink = output.Detach();
  RecordOp(sink, "DdpSinkBackward", {&output}, [rank, version](const Tensor&) -> TensorList {
    throw Error(
        StrCat("[ddp] rank ", rank, ": static graph's first backward ran under no_sync. PyTorch ",
               version.ToString(),
               " counts static graph's first iteration from the first backward, no_sync "
               "or not, and fails here (an internal assert on expect_autograd_hooks_, "
               "then 'Expected to have finished reduction in the prior iteration' at "
               "every later forward). Run the first iteration synced, outside no_sync "
               "(PyTorch 1.13, --pytorch-version 1.13, allowed it)"),
        absl::StatusCode::kFailedPrecondition);
  });
  return sink;
}

}  // namespace

BucketAssignment InitialBucketAssignment(const std::vector<BucketTensorSpec>& parameters,
                                         const DdpOptions& options) {
  // Parameter order need not match the order gradients arrive in, so the first iteration does
  // not split by size unless unused parameters must be found (PyTorch >= 1.12) or the user gave
  // a cap per bucket (2.11): BucketCapsOf says which.
  absl::StatusOr<BucketAssignment> sorted =
      ComputeBucketAssignmentBySize(parameters, BucketCapsOf(options).initial);
  if (!sorted.ok()) ThrowStatus(sorted.status());
  // Reversed: parameters defined last produce gradients first.
  std::reverse(sorted->buckets.begin(), sorted->buckets.end());
  std::reverse(sorted->limits.begin(), sorted->limits.end());
  return *sorted;
}

absl::StatusOr<std::shared_ptr<DistributedDataParallel>> DistributedDataParallel::Create(
    std::shared_ptr<nn::Module> module, comm::ProcessGroup& group, DdpOptions options) {
  if (module == nullptr) return absl::InvalidArgumentError("[ddp] no module to wrap");
  DDPKIT_RETURN_IF_ERROR(ValidateDdpOptions(options));
  NamedTensors params;
  for (auto& [name, p] : module->NamedParameters()) {  // shared parameters: first name wins
    if (p.requires_grad()) params.emplace_back(name, p);
  }
  if (params.empty()) {
    return absl::InvalidArgumentError(WithPyTorchPhrase(
        "[ddp] the module has no parameter that requires a gradient; DDP has nothing to "
        "synchronise, train it without DDP",
        {pytorch_phrase::kNoTrainableParameter}));
  }
  for (const auto& [name, p] : params) {
    if (options.mixed_precision && p.dtype() != options.mixed_precision->param_dtype) {
      return absl::InvalidArgumentError(
          StrCat("[ddp] mixed_precision: parameter '", name, "' is ", DTypeName(p.dtype()),
                 " but param_dtype is ", DTypeName(options.mixed_precision->param_dtype),
                 "; ddpkit computes in the parameters' own dtype, so make them agree"));
    }
  }
  if (options.init_sync) {  // PyTorch 2.8's init_sync=False: no collective at construction
    DDPKIT_RETURN_IF_ERROR(VerifySameModelOnAllRanks(params, group));
    // Parameters and buffers in one list, as PyTorch's _sync_module_states: a float32 model is
    // one broadcast.
    NamedTensors state = params;
    if (SyncsBuffersAtConstruction(options)) {
      for (auto& b : module->NamedBuffers()) state.push_back(b);
    }
    DDPKIT_RETURN_IF_ERROR(BroadcastFromRank(state, group, "model state"));
  }

  std::shared_ptr<DistributedDataParallel> ddp(
      new DistributedDataParallel(std::move(module), group, std::move(options)));
  const BucketAssignment initial = InitialBucketAssignment(SpecsOf(params), ddp->options_);
  try {
    ddp->reducer_ = std::make_unique<Reducer>(
        std::move(params), initial, group,
        ReducerOptions{.limits = LimitsOf(ddp->options_),
                       .find_unused_parameters = ddp->options_.find_unused_parameters,
                       .gradient_as_bucket_view = ddp->options_.gradient_as_bucket_view,
                       .skip_all_reduce_unused_params = ddp->options_.skip_all_reduce_unused_params,
                       .batched_grad_copy = ddp->options_.batched_grad_copy,
                       .pytorch_version = ddp->options_.pytorch_version});
  } catch (const Error& e) {
    return e.ToStatus();
  }
  if (ddp->options_.static_graph) ddp->reducer_->SetStaticGraph();
  if (const std::optional<MixedPrecision>& mp = ddp->options_.mixed_precision) {
    ddp->reducer_->RegisterCommHook(MixedPrecisionHook(group, mp->Reduce()),
                                    std::string(kMixedPrecisionHookName));
  }
  DdpLoggingData& logging = ddp->reducer_->logging_data();
  logging.set_module_name(ddp->options_.module_name);
  logging.set_broadcast_buffers(SyncsBuffersEachForward(ddp->options_));
  logging.set_pytorch_version(ddp->options_.pytorch_version.ToString());
  for (size_t cap : LimitsOf(ddp->options_).per_bucket) {
    logging.add_per_bucket_cap_bytes(static_cast<int64_t>(cap));
  }
  if (ddp->options_.static_graph && ddp->options_.find_unused_parameters) {
    Log(LogLevel::kWarning,
        "static_graph and find_unused_parameters are both set; static_graph already handles "
        "unused parameters, so find_unused_parameters is not needed");
  }
  return ddp;
}

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 comm::ProcessGroup& group, DdpOptions options)
    : module_(std::move(module)), group_(group), options_(std::move(options)) {
  RegisterModule("module", module_);  // parameters appear as "module.<name>", as in PyTorch
}

void DistributedDataParallel::RegisterCommHook(CommHook hook, std::string name,
                                               CommHookStats stats) {
  reducer_->RegisterCommHook(std::move(hook), std::move(name), std::move(stats));
}

void DistributedDataParallel::RegisterBuiltinCommHook(BuiltinCommHook hook) {
  reducer_->RegisterCommHook(MakeBuiltinCommHook(hook, group_),
                             std::string(BuiltinCommHookName(hook)));
}

void DistributedDataParallel::SyncBuffers(int root) {
  // Forward cannot return a Status: the broadcast's failure is thrown (autograd/base/error.h, tier
  // 4).
  if (absl::Status s = BroadcastFromRank(module_->NamedBuffers(), group_, "buffer", root);
      !s.ok()) {
    ThrowStatus(s);
  }
}

Tensor DistributedDataParallel::Forward(const Tensor& input) {
  const bool grad_enabled = GradMode::IsEnabled();
  const bool sync = grad_enabled && require_backward_grad_sync_;
  if (sync) reducer_->PrepareForForward();
  // After a no_sync forward the buffers are not re-broadcast (as PyTorch).
  const bool sync_buffers = require_forward_param_sync_ && SyncsBuffersEachForward(options_) &&
                            !module_->NamedBuffers().empty();
  Tensor active_ranks;
  int buffer_root = 0;  // without Join rank 0's buffers are the authoritative copy
  if (std::shared_ptr<comm::Work> count = join::Join::NotifyJoinContext(*this, &active_ranks)) {
    // Joined ranks are shadowing: tell them what this iteration issues, in the order below.
    reducer_->SetJoinCountWork(count, active_ranks, divide_by_initial_world_size_);
    const int64_t plan = AllreduceJoinPlan(
        (sync ? kSync : 0) | (sync && reducer_->static_graph_first_iteration() ? kStaticFirst : 0) |
        (grad_enabled && reducer_->rebuild_pending() ? kRebuild : 0) |
        (sync_buffers ? kBuffers : 0) | (int64_t{group_.rank()} << kRankShift));
    buffer_root = static_cast<int>(plan >> kRankShift);
  }
  if (grad_enabled) {
    reducer_->EnsurePriorReductionFinished();
    reducer_->RebuildBuckets();
  }
  if (sync_buffers) SyncBuffers(buffer_root);
  if (grad_enabled && !sync) reducer_->NoteNoSyncForward();
  Tensor output = module_->Forward(input);
  if (!sync) {
    require_forward_param_sync_ = false;
    if (grad_enabled && reducer_->static_graph_first_iteration() &&
        Follows(options_.pytorch_version, DdpRule::kStaticGraphCountsBackwards)) {
      output = AttachNoSyncFirstBackwardFailure(output, group_.rank(), options_.pytorch_version);
    }
    return output;
  }
  require_forward_param_sync_ = true;
  if (reducer_->static_graph_first_iteration())
    output = AttachDelayAllReduce(output, reducer_.get());
  const bool search_unused = options_.find_unused_parameters && !options_.static_graph;
  reducer_->PrepareForBackward(search_unused ? TensorList{output} : TensorList{});
  return output;
}

// The plan bits are combined with MAX, not a bitwise OR (no backend offers one). MAX equals the
// OR here because every active rank sends the same plan — each bit follows from state all
// active ranks share: whether they are under no_sync (DDP requires it of every rank alike),
// their synced-iteration count (static graph's first, the rebuild), the options and the
// buffers — and a joined rank sends 0. Active ranks whose plans differed would already issue
// different collectives from each other, which no combination of bits could repair. Above the
// bits each active rank puts its rank, so the MAX also names the highest active rank: the
// buffers' source under Join, as PyTorch's _find_common_rank (rank 0 may have joined already,
// with stale statistics).
int64_t DistributedDataParallel::AllreduceJoinPlan(int64_t plan) {
  comm::ScopedCollectiveTag tag({.purpose = "join_plan"});
  Tensor t = Tensor::Full({1}, static_cast<double>(plan), DType::kInt64);
  if (absl::Status s = group_.Allreduce(t, comm::ReduceOp::kMax)->Wait(); !s.ok()) {
    ThrowCommFailure(group_.rank(), "sharing the iteration's plan with joined ranks", s);
  }
  return t.data<int64_t>()[0];
}

// DDP's join hook: per shadowed iteration, exactly the collectives an active rank's DDP issues
// (Forward and the reducer), with zeros for gradients; at the end, every rank takes the model
// of the highest rank among the last to join.
class DdpJoinHook final : public join::JoinHook {
 public:
  explicit DdpJoinHook(DistributedDataParallel& ddp) : ddp_(ddp) {}

  void MainHook() override {
    using D = DistributedDataParallel;
    const int64_t plan = ddp_.AllreduceJoinPlan(0);  // 0: this rank adds nothing to the plan
    if (plan & D::kRebuild) ddp_.reducer_->RebuildBucketsForJoin();
    if (plan & D::kBuffers) ddp_.SyncBuffers(static_cast<int>(plan >> D::kRankShift));
    if (plan & D::kSync) ddp_.reducer_->ShadowBackward((plan & D::kStaticFirst) != 0);
  }

  void PostHook(bool is_last_joiner) override {
    comm::ScopedCollectiveTag tag({.purpose = "join_final_sync"});
    comm::ProcessGroup& group = ddp_.group_;
    Tensor rank = Tensor::Full({1}, is_last_joiner ? group.rank() : -1.0, DType::kInt64);
    if (absl::Status s = group.Allreduce(rank, comm::ReduceOp::kMax)->Wait(); !s.ok())
      ThrowCommFailure(group.rank(), "choosing the rank whose model every rank takes", s);
    const int authoritative = static_cast<int>(rank.data<int64_t>()[0]);
    DDPKIT_INTERNAL_CHECK(authoritative >= 0, "[ddp] rank ", group.rank(),
                          ": no rank reported being a last joiner (Join's post-hooks)");
    ddp_.authoritative_rank_ = authoritative;
    // Buffers too, unless from 2.1 the options keep them rank-local (_sync_final_model).
    NamedTensors state = ddp_.reducer_->parameters();
    if (SyncsBuffersAtJoinEnd(ddp_.options_)) {
      for (auto& b : ddp_.module_->NamedBuffers()) state.push_back(b);
    }
    if (absl::Status s = BroadcastCoalesced(state, group, authoritative, "model state"); !s.ok())
      ThrowStatus(s);
  }

 private:
  DistributedDataParallel& ddp_;
};

std::unique_ptr<join::JoinHook> DistributedDataParallel::MakeJoinHook() {
  // A joined rank shadows every bucket's allreduce, so a bucket the active ranks skip would pair
  // it with their next collective: PyTorch hangs or mixes gradients there.
  DDPKIT_CHECK(!(join_config().enable && options_.skip_all_reduce_unused_params), "[ddp] rank ",
               group_.rank(),
               ": skip_all_reduce_unused_params does not work under an enabled Join: a rank that "
               "has joined shadows every gradient bucket's allreduce, so a bucket the others skip "
               "would pair its allreduce with their next collective (PyTorch hangs or mixes "
               "unrelated gradients there). Turn the option off, or equalise the inputs and "
               "leave Join disabled");
  if (join_config().enable) reducer_->logging_data().set_join_uneven_inputs(true);
  return std::make_unique<DdpJoinHook>(*this);
}

}  // namespace ddpkit::reducer
