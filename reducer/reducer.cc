#include "reducer/reducer.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_join.h"
#include "autograd/base/log.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/kernels.h"
#include "reducer/reducer_errors.h"
#include "reducer/reducer_logging.h"

namespace ddpkit::reducer {
// ============================================================================ construction

Reducer::Reducer(NamedTensors parameters, const BucketAssignment& initial,
                 comm::ProcessGroup& group, ReducerOptions options)
    : params_(std::move(parameters)), group_(group), options_(options) {
  DDPKIT_CHECK(!params_.empty(), "[ddp] the reducer needs at least one parameter");
  const size_t n = params_.size();
  marked_ready_.assign(n, 0);
  grad_ready_order_.reserve(n);  // the hooks append without allocating
  rebuilt_param_indices_.reserve(n);
  unused_parameters_.reserve(n);
  prev_unused_parameters_.reserve(n);
  expected_hook_counts_.assign(n, 0);
  hooks_left_.assign(n, 0);
  local_used_map_ = Tensor::Zeros({static_cast<int64_t>(n)}, DType::kInt32);
  local_used_map_reduced_ = Tensor::Zeros({static_cast<int64_t>(n)}, DType::kInt32);

  InitializeBuckets(initial);

  // One post-hook per parameter's gradient accumulator; the accumulator is the same object
  // for the parameter's whole life, so this is done once.
  absl::flat_hash_set<const AccumulateGrad*> seen;
  for (size_t i = 0; i < n; ++i) {
    const auto& [name, param] = params_[i];
    DDPKIT_CHECK(param.requires_grad(), "[ddp] parameter ", i, " ('", name,
                 "') does not require grad; leave it out of the reducer");
    std::shared_ptr<AccumulateGrad> accumulator = param.grad_accumulator();
    DDPKIT_CHECK(seen.insert(accumulator.get()).second, "[ddp] parameter ", i, " ('", name,
                 "') is listed twice; shared parameters must be deduplicated first");
    hook_handles_.push_back(
        accumulator->AddPostHook([this, i](const Tensor&) { AutogradHook(i); }));
    grad_accumulators_.push_back(std::move(accumulator));
  }

  LogConstruction(logging_, group_, params_, options_, buckets_, initial);
}

Reducer::~Reducer() {
  for (size_t i = 0; i < grad_accumulators_.size(); ++i) {
    grad_accumulators_[i]->RemovePostHook(hook_handles_[i]);
  }
}

void Reducer::SetStaticGraph() {
  DDPKIT_CHECK(num_iterations_ == 0 && !require_finalize_,
               "[ddp] static_graph must be set after constructing DDP and before the first "
               "iteration");
  static_graph_ = true;
  logging_.set_static_graph(true);
}

void Reducer::RegisterCommHook(CommHook hook, std::string name, CommHookStats stats) {
  DDPKIT_CHECK(!comm_hook_,
               WithPyTorchPhrase(StrCat("[ddp] a communication hook is already registered ('",
                                        logging_.comm_hook(), "'); register at most one"),
                                 {pytorch_phrase::kSecondCommHook}));
  DDPKIT_CHECK(num_iterations_ == 0,
               "[ddp] register the communication hook before the first "
               "iteration");
  DDPKIT_CHECK(hook != nullptr, "[ddp] the communication hook is empty");
  comm_hook_ = std::move(hook);
  comm_hook_stats_ = std::move(stats);
  logging_.set_comm_hook(std::move(name));
}

// Fresh flat buffers for `assignment` (in reduction order), a view per parameter, and the
// variable locators. With gradient_as_bucket_view, gradients that already exist move into
// their new views (this happens at the rebuild).
void Reducer::InitializeBuckets(const BucketAssignment& assignment) {
  DDPKIT_CHECK(!expect_autograd_hooks_, "[ddp] buckets cannot be rebuilt during backward");
  buckets_.clear();
  buckets_.reserve(assignment.buckets.size());
  locators_.assign(params_.size(), VariableLocator{});
  for (size_t b = 0; b < assignment.buckets.size(); ++b) {
    const std::vector<size_t>& indices = assignment.buckets[b];
    DDPKIT_CHECK(!indices.empty(), "[ddp] bucket ", b, " is empty");
    Bucket bucket;
    bucket.size_limit = assignment.limits.at(b);
    const DType dtype = params_.at(indices[0]).second.dtype();
    int64_t total = 0;
    for (size_t index : indices) {
      const auto& [name, param] = params_.at(index);
      DDPKIT_CHECK(param.dtype() == dtype, "[ddp] bucket ", b, " mixes ", DTypeName(dtype), " and ",
                   DTypeName(param.dtype()), " (parameter ", index, " '", name,
                   "'): all parameters of a bucket must have one dtype");
      bucket.offsets.push_back(total);
      bucket.lengths.push_back(param.numel());
      total += param.numel();
    }
    // The bucket lives where its parameters do (a GPU's buckets are allreduced on that GPU).
    const Device device = params_.at(indices[0]).second.device();
    for (size_t index : indices) {
      DDPKIT_CHECK(params_.at(index).second.device() == device, "[ddp] bucket ", b, " mixes ",
                   device.ToString(), " and ", params_.at(index).second.device().ToString(),
                   " (parameter ", index, " '", params_.at(index).first,
                   "'): move the whole model to one device before wrapping it in DDP");
    }
    bucket.gradients = Tensor::Zeros({total}, dtype, device);
    for (size_t i = 0; i < indices.size(); ++i) {
      const Tensor& param = params_[indices[i]].second;
      Tensor view = bucket.gradients.Flatten()
                        .Rows(bucket.offsets[i], bucket.offsets[i] + bucket.lengths[i])
                        .View(param.shape());
      if (options_.gradient_as_bucket_view && param.grad().defined()) {
        view.CopyFrom(param.grad());
        param.set_grad(view);
      }
      bucket.variable_indices.push_back(indices[i]);
      bucket.variables.push_back(param);
      bucket.views.push_back(std::move(view));
      locators_[indices[i]] = {b, i};
    }
    buckets_.push_back(std::move(bucket));
  }
}

std::vector<BucketInfo> Reducer::BucketInfos() const { return BucketInfosOf(buckets_, params_); }

std::string Reducer::ParamName(size_t index) const { return params_[index].first; }

// The world size; under Join with divide_by_initial_world_size off, the number of ranks still
// active in this iteration (the joined ones contribute zeros).
double Reducer::DivideFactor() {
  if (!join_count_work_ || divide_by_initial_world_size_) return group_.size();
  if (absl::Status s = join_count_work_->Wait(); !s.ok()) {
    ThrowCommFailure(group_.rank(), "counting the active ranks", s);
  }
  return static_cast<double>(join_active_ranks_.data<int64_t>()[0]);
}

// ============================================================================ forward side

void Reducer::PrepareForForward() {
  ++num_iterations_;
  const Clock::time_point now = Clock::now();
  timer_.StartForward(now);
  LogForward(logging_, num_iterations_,
             Follows(options_.pytorch_version, DdpRule::kSkipAllReduceUnusedParams));
  TraceIteration(TraceEventType::kForward, now);
}

void Reducer::EnsurePriorReductionFinished() {
  if (!require_finalize_) return;
  std::vector<ParamRef> missing;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!marked_ready_[i]) missing.push_back({i, ParamName(i)});
  }
  throw Error(PriorReductionNotFinishedMessage(group_.rank(), missing,
                                               options_.find_unused_parameters, static_graph_),
              absl::StatusCode::kFailedPrecondition);
}

void Reducer::PrepareForBackward(const TensorList& outputs) {
  timer_.StartBackward(Clock::now());
  expect_autograd_hooks_ = true;
  grad_ready_order_.clear();
  ResetBucketCounting();
  has_marked_unused_parameters_ = false;
  finalize_queued_ = false;
  std::fill(marked_ready_.begin(), marked_ready_.end(), 0);
  if (static_graph_ && static_graph_recorded_) hooks_left_ = expected_hook_counts_;
  if (dynamic_find_unused()) {
    unused_parameters_.clear();
    const Clock::time_point search_start = Clock::now();
    for (size_t index : SearchUnusedParameters(outputs)) unused_parameters_.push_back(index);
    TraceIteration(TraceEventType::kUnusedSearch, Clock::now(), search_start);
    LogUnusedSet(logging_, prev_unused_parameters_, unused_parameters_, num_iterations_);
    if (unused_parameters_.empty() && num_iterations_ == 1 && group_.rank() == 0) {
      Log(LogLevel::kWarning,
          "find_unused_parameters is on, but the forward pass used every parameter; if that "
          "holds for every iteration, turn it off: it costs a graph traversal per iteration "
          "and an extra allreduce");
    }
  }
  PlanSkippedBuckets();
}

// skip_all_reduce_unused_params: the buckets whose every parameter this rank leaves unused in
// this backward (PyTorch's is_unused_bucket, on this rank's own unused set). Static graph's first
// backward reduces everything, whatever the option says.
void Reducer::PlanSkippedBuckets() {
  skipped_buckets_.assign(buckets_.size(), 0);
  if (!options_.skip_all_reduce_unused_params || static_graph_first_iteration() ||
      !(dynamic_find_unused() || static_graph_)) {
    return;
  }
  std::vector<uint8_t> unused(params_.size(), 0);
  for (size_t index : unused_parameters_) unused[index] = 1;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const std::vector<size_t>& indices = buckets_[b].variable_indices;
    skipped_buckets_[b] =
        std::all_of(indices.begin(), indices.end(), [&](size_t i) { return unused[i] != 0; });
  }
  if (group_.size() > 1) CheckRanksSkipAlike();
}

// Ranks that skip different buckets would pair one rank's allreduce of bucket b with another's
// of bucket b+1 (or of the used map): PyTorch then mixes unrelated gradients or aborts. One
// allgather of every rank's skipped set, before any bucket launches, names them instead — a
// collective PyTorch does not issue, the price of the diagnosis (docs/reducer.md).
void Reducer::CheckRanksSkipAlike() {
  comm::ScopedCollectiveTag tag({.purpose = "skip_check"});
  const int world = group_.size();
  const int64_t words = static_cast<int64_t>((buckets_.size() + 63) / 64);
  Tensor mine = Tensor::Zeros({words}, DType::kInt64);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (skipped_buckets_[b]) mine.data<int64_t>()[b / 64] |= int64_t{1} << (b % 64);
  }
  Tensor all = Tensor::Zeros({words * world}, DType::kInt64);
  if (absl::Status s = group_.Allgather(mine, all)->Wait(); !s.ok()) {
    ThrowCommFailure(group_.rank(), "comparing the buckets each rank skips", s);
  }
  auto skips = [&](int rank, size_t b) {
    return (all.data<int64_t>()[rank * words + static_cast<int64_t>(b / 64)] >> (b % 64) & 1) != 0;
  };
  for (size_t b = 0; b < buckets_.size(); ++b) {
    std::vector<int> skipping, reducing;
    for (int r = 0; r < world; ++r) (skips(r, b) ? skipping : reducing).push_back(r);
    if (skipping.empty() || reducing.empty()) continue;
    std::vector<std::string> params;
    for (size_t index : buckets_[b].variable_indices) {
      params.push_back(StrCat(index, " '", ParamName(index), "'"));
    }
    throw Error(
        StrCat("[ddp] rank ", group_.rank(), ": skip_all_reduce_unused_params: rank(s) ",
               absl::StrJoin(skipping, ", "), " skip gradient bucket ", b, " (parameters ",
               absl::StrJoin(params, ", "), "), which rank(s) ", absl::StrJoin(reducing, ", "),
               " reduce: the ranks left different parameters unused, so their "
               "allreduces would pair up wrongly (PyTorch mixes unrelated buckets' "
               "gradients or aborts in Gloo). Skip only where every rank leaves the same "
               "parameters unused, or turn skip_all_reduce_unused_params off"),
        absl::StatusCode::kFailedPrecondition);
  }
}

void Reducer::ResetBucketCounting() {
  next_bucket_ = 0;
  num_buckets_reduced_ = 0;
  timer_.ClearLaunches();
  for (Bucket& bucket : buckets_) {
    bucket.pending = bucket.variable_indices.size();
    bucket.deferred.clear();
    bucket.future_work.reset();
  }
}

// Walks the autograd graph from the outputs; a parameter whose accumulator is not reached
// will get no gradient in this backward, so it is marked ready up front (at the first hook).
std::vector<size_t> Reducer::SearchUnusedParameters(const TensorList& outputs) const {
  absl::flat_hash_set<const Node*> visited;
  std::vector<const Node*> stack;
  for (const Tensor& output : outputs) {
    Edge edge = GradientEdge(output);
    if (edge.valid() && visited.insert(edge.node.get()).second) stack.push_back(edge.node.get());
  }
  while (!stack.empty()) {
    const Node* node = stack.back();
    stack.pop_back();
    for (const Edge& edge : node->next_edges()) {
      if (edge.valid() && visited.insert(edge.node.get()).second) stack.push_back(edge.node.get());
    }
  }
  std::vector<size_t> unused;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!visited.contains(grad_accumulators_[i].get())) {
      unused.push_back(i);
      if (group_.options().debug_level == comm::DebugLevel::kDetail) {
        Log(LogLevel::kInfo, StrCat("parameter ", i, " ('", ParamName(i),
                                    "') is unused in this iteration's forward"));
      }
    }
  }
  return unused;
}

// ============================================================================ backward: hooks

void Reducer::RecordLocalUse(size_t index) {
  if (params_[index].second.grad().defined()) local_used_map_.data<int32_t>()[index] = 1;
}

// Runs after parameter `index`'s gradient accumulator, on the thread running backward.
void Reducer::AutogradHook(size_t index) {
  // Usage is recorded even under no_sync, so a parameter used only in accumulation steps
  // still counts as used when the synced step reduces (PyTorch 2.4's fix of issue #69031);
  // 1.13 recorded only the synced backward's.
  const bool records_usage = dynamic_find_unused() || static_graph_first_iteration();
  if (records_usage && no_sync_use_counts_) RecordLocalUse(index);
  if (!expect_autograd_hooks_) return;  // no_sync, or a backward DDP's forward did not arm
  if (records_usage && !no_sync_use_counts_) RecordLocalUse(index);
  if (static_graph_first_iteration()) {
    ++expected_hook_counts_[index];  // everything is reduced at the end, by DelayAllReduce
    return;
  }
  TraceHook(index);
  grad_ready_order_.push_back(index);

  // Parameters the forward did not use get no hook of their own; they are marked at the
  // first hook rather than in PrepareForBackward, so a forward whose output is dropped
  // never starts a reduction.
  if (!has_marked_unused_parameters_) {
    has_marked_unused_parameters_ = true;
    for (size_t unused : unused_parameters_) MarkVariableReady(unused);
  }

  if (static_graph_) {
    if (hooks_left_[index] == 0) {
      throw Error(StaticGraphChangedMessage(group_.rank(), {index, ParamName(index)},
                                            expected_hook_counts_[index]),
                  absl::StatusCode::kFailedPrecondition);
    }
    if (--hooks_left_[index] > 0) return;  // more firings expected (checkpointing, reuse)
  }
  if (ShouldRebuildBuckets()) rebuilt_param_indices_.push_back(index);
  MarkVariableReady(index);

  if (next_bucket_ == buckets_.size() && !finalize_queued_) {
    // Every bucket is launched: finalize once the whole backward is over. On the outermost
    // pass, not the nested (checkpointed) one we may be in: a hook that fires again in a later
    // nested pass is then diagnosed as "marked twice" rather than dropped after an early
    // finalize (PyTorch finalizes at the end of the innermost pass and silently drops it).
    finalize_queued_ = true;
    if (dynamic_find_unused()) LaunchLocalUsedMapAllreduce();
    Engine::QueueOuterCallback([this] {
      timer_.EndCompute(Clock::now());
      if (static_graph_ && ShouldRebuildBuckets()) {
        // Static graph rebuilds after its second iteration; unused parameters, which fire no
        // hook, go last.
        for (size_t unused : unused_parameters_) rebuilt_param_indices_.push_back(unused);
      }
      FinalizeBackward();
    });
  }
}

// Copies the parameter's gradient, divided by the world size, into its bucket view, and
// launches every bucket that became launchable.
void Reducer::MarkVariableReady(size_t index) {
  if (marked_ready_[index]) {
    logging_.set_can_set_static_graph(false);  // a hook that fires twice needs static_graph
    throw Error(MarkedTwiceMessage(group_.rank(), {index, ParamName(index)}),
                absl::StatusCode::kFailedPrecondition);
  }
  marked_ready_[index] = 1;
  require_finalize_ = true;
  if (div_factor_ == 0) div_factor_ = DivideFactor();

  const VariableLocator& locator = locators_[index];
  Bucket& bucket = buckets_[locator.bucket_index];
  const Tensor& view = bucket.views[locator.intra_bucket_index];
  const Tensor& param = params_[index].second;
  const Tensor& grad = param.grad();
  if (!grad.defined()) {
    view.Zero();  // an unused parameter contributes zeros
  } else if (!grad.IsAliasOf(view)) {
    if (options_.batched_grad_copy) {
      bucket.deferred.push_back(locator.intra_bucket_index);  // with the bucket's others, below
    } else {
      // Without a hook the division is fused into the copy, as a multiplication by 1/W; a hook
      // owns the math.
      if (comm_hook_ || div_factor_ == 1) {
        view.CopyFrom(grad);
      } else {
        ScaledCopy(view, grad, 1.0 / div_factor_);
      }
      if (options_.gradient_as_bucket_view) param.set_grad(view);
    }
  } else if (!comm_hook_ && div_factor_ != 1 && !options_.batched_grad_copy) {
    DivideInPlace(view, div_factor_);  // .grad already is the view: PyTorch divides it in place
  }

  if (--bucket.pending == 0) {
    if (options_.batched_grad_copy) CopyDeferredGradients(bucket);
    MarkBucketReady(locator.bucket_index);
  }
}

// batched_grad_copy (PyTorch 2.13): the bucket's gradients copied in together, then the whole
// bucket divided once — zeroed slices and .grad views included — instead of each gradient
// multiplied by 1/W on its way in. The bits differ unless W is a power of two.
void Reducer::CopyDeferredGradients(Bucket& bucket) {
  for (size_t slot : bucket.deferred) {
    bucket.views[slot].CopyFrom(bucket.variables[slot].grad());
    if (options_.gradient_as_bucket_view) bucket.variables[slot].set_grad(bucket.views[slot]);
  }
  bucket.deferred.clear();
  if (!comm_hook_ && div_factor_ != 1) DivideInPlace(bucket.gradients, div_factor_);
}

// Buckets are launched strictly in index order, so every rank issues the same collectives in
// the same order however its gradients arrive: a ready bucket waits for all earlier ones.
void Reducer::MarkBucketReady(size_t bucket_index) {
  TraceBucket(TraceEventType::kBucketReady, bucket_index);
  if (bucket_index > next_bucket_) return;
  for (; next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0; ++next_bucket_) {
    if (next_bucket_ < skipped_buckets_.size() && skipped_buckets_[next_bucket_]) continue;
    LaunchBucket(next_bucket_);
    // Static graph's first backward reduces everything at its end, uncounted (as PyTorch).
    if (!static_graph_first_iteration()) ++num_buckets_reduced_;
  }
}

void Reducer::LaunchBucket(size_t bucket_index) {
  Bucket& bucket = buckets_[bucket_index];
  bucket.launched_at = Clock::now();
  timer_.NoteLaunch(bucket.launched_at);
  comm::ScopedCollectiveTag tag(
      {.purpose = "bucket", .bucket = static_cast<int32_t>(bucket_index)});
  TraceBucket(TraceEventType::kAllreduceStart, bucket_index, bucket.launched_at);
  if (comm_hook_) {
    GradBucket grad_bucket(bucket_index, buckets_.size(), bucket.gradients, bucket.views,
                           bucket.variables);
    bucket.future_work = comm_hook_(grad_bucket);
    DDPKIT_CHECK(bucket.future_work != nullptr, "[ddp] the communication hook '",
                 logging_.comm_hook(), "' returned no future for bucket ", bucket_index);
  } else {
    bucket.future_work =
        comm::Future::FromWork(group_.Allreduce(bucket.gradients), bucket.gradients);
  }
}

void Reducer::LaunchLocalUsedMapAllreduce() {
  comm::ScopedCollectiveTag tag({.purpose = "used_map"});
  local_used_map_reduced_.CopyFrom(local_used_map_);  // hooks may write the map meanwhile
  local_used_map_reduced_ready_ = false;
  local_used_work_ =
      comm::Future::FromWork(group_.Allreduce(local_used_map_reduced_), local_used_map_reduced_);
}

// Static graph's first synced backward: the hooks only counted. Now every parameter is
// ready, so reduce all buckets in order and finalize.
void Reducer::DelayAllReduce() {
  // Two forwards before one backward attach two sinks, and both queue this: the first reduces
  // everything (once, as PyTorch's test_static_graph_multi_forward expects); the second finds
  // the graph recorded and has nothing left to do.
  if (!static_graph_first_iteration()) return;
  LaunchLocalUsedMapAllreduce();
  if (join_count_work_) {
    ShareHookCounts("sharing static graph's hook counts with joined ranks", /*adopt=*/false);
  }
  UnusedFromHookCounts();
  std::fill(marked_ready_.begin(), marked_ready_.end(), 0);
  for (size_t i = 0; i < params_.size(); ++i) MarkVariableReady(i);  // launches in order
  timer_.EndCompute(Clock::now());
  FinalizeBackward();
}

// Under Join, ranks that ran out before static graph's first synced backward shadow it and
// never count hooks of their own. Every rank contributes its counts (a joined rank zeros) to a
// MAX; only a joined rank `adopt`s the result, so that when it trains later it expects the graph
// the others recorded. An active rank keeps its own counts: ranks' graphs may differ.
void Reducer::ShareHookCounts(std::string_view what, bool adopt) {
  comm::ScopedCollectiveTag tag({.purpose = "hook_counts"});
  const int64_t n = static_cast<int64_t>(params_.size());
  Tensor counts = Tensor::Empty({n}, DType::kInt32);
  std::copy(expected_hook_counts_.begin(), expected_hook_counts_.end(), counts.data<int32_t>());
  if (absl::Status s = group_.Allreduce(counts, comm::ReduceOp::kMax)->Wait(); !s.ok()) {
    ThrowCommFailure(group_.rank(), what, s);
  }
  if (adopt) {
    std::copy(counts.data<int32_t>(), counts.data<int32_t>() + n, expected_hook_counts_.begin());
  }
}

// Parameters whose hook never fires in the static graph: marked ready at each backward's first
// hook from now on.
void Reducer::UnusedFromHookCounts() {
  unused_parameters_.clear();
  for (size_t i = 0; i < params_.size(); ++i) {
    if (expected_hook_counts_[i] == 0) unused_parameters_.push_back(i);
  }
}

// ============================================================================ finalize

void Reducer::FinalizeBackward() {
  expect_autograd_hooks_ = false;
  require_finalize_ = false;
  DDPKIT_INTERNAL_CHECK(next_bucket_ == buckets_.size(), "[ddp] rank ", group_.rank(),
                        ": finalize found ", buckets_.size() - next_bucket_,
                        " bucket(s) not launched");
  Clock::time_point comm_end = timer_.comm_start();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (!buckets_[b].future_work) continue;  // skipped: its gradients stay as they were
    WaitForBucket(b, "reducing");
    const Clock::time_point completed = buckets_[b].future_work->completed_at();
    comm_end = std::max(comm_end, completed);
    TraceBucket(TraceEventType::kAllreduceEnd, b, completed);
    FinalizeBucket(buckets_[b]);
  }
  // Collected even when every parameter was used here, so the next launch cannot overlap it.
  CollectUsedMap("reducing the used-parameter map");
  if (static_graph_first_iteration()) RecordStaticGraphUnused();
  LogIteration();
  ResetAfterBackward();
  RecordTimes(comm_end);
}

// ---- The end-of-backward steps finalize and the join shadow share -------------------------

// Waits for bucket `b`'s reduction (its allreduce, or the comm hook's future) and leaves the
// result in the bucket's buffer. `what` ("reducing", ...) begins the error message.
void Reducer::WaitForBucket(size_t b, std::string_view what) {
  Bucket& bucket = buckets_[b];
  absl::StatusOr<Tensor> result = bucket.future_work->Wait(comm::CompletionBound(group_.options()));
  if (!result.ok()) {
    ThrowCommFailure(group_.rank(),
                     StrCat(what, " gradient bucket ", b, " (parameters ",
                            absl::StrJoin(bucket.variable_indices, ", "), ")"),
                     result.status());
  }
  if (result->IsAliasOf(bucket.gradients)) return;
  DDPKIT_CHECK(result->numel() == bucket.gradients.numel(), "[ddp] the communication hook '",
               logging_.comm_hook(), "' returned ", result->numel(), " elements for bucket ", b,
               " of ", bucket.gradients.numel());
  bucket.gradients.CopyFrom(*result);
}

// Waits for the used-parameter map's allreduce, when one is in flight and not yet collected.
void Reducer::CollectUsedMap(std::string_view what) {
  if (local_used_map_reduced_ready_ || !local_used_work_) return;
  if (absl::StatusOr<Tensor> r = local_used_work_->Wait(comm::CompletionBound(group_.options()));
      !r.ok()) {
    ThrowCommFailure(group_.rank(), what, r.status());
  }
  local_used_map_reduced_ready_ = true;
}

// Static graph's first synced backward is over: which parameters no rank used is fixed now.
void Reducer::RecordStaticGraphUnused() {
  static_graph_recorded_ = true;
  static_globally_unused_.assign(params_.size(), 0);
  for (size_t i = 0; i < params_.size(); ++i) {
    static_globally_unused_[i] = local_used_map_reduced_.data<int32_t>()[i] == 0;
  }
}

// ---- Finalize's bookkeeping ---------------------------------------------------------------

// Logging data: this iteration's unused parameters, gradient arrival order and compression.
void Reducer::LogIteration() {
  LogIterationUsage(
      logging_, params_, options_.find_unused_parameters || static_graph_,
      [this](size_t i) { return GloballyUnused(i); }, grad_ready_order_);
  logging_.set_num_buckets_reduced(num_buckets_reduced_);
  if (comm_hook_stats_) *logging_.mutable_compression() = comm_hook_stats_();
}

// What one synced backward used up: the used map (static graph keeps its first), the divide
// factor, this forward's join count.
void Reducer::ResetAfterBackward() {
  if (dynamic_find_unused()) local_used_map_.Zero();
  local_used_work_.reset();
  last_divide_factor_ = comm_hook_ ? 0 : div_factor_;
  div_factor_ = 0;
  join_count_work_.reset();
}

// The iteration's forward, backward compute, communication, overlap and exposed time.
void Reducer::RecordTimes(Clock::time_point comm_end) {
  const Clock::time_point finalize_end = Clock::now();
  TraceIteration(TraceEventType::kFinalize, finalize_end, timer_.compute_end());
  timer_.Record(comm_end, finalize_end, logging_,
                group_.options().debug_level == comm::DebugLevel::kDetail);
}

bool Reducer::GloballyUnused(size_t index) {
  if (!options_.find_unused_parameters && !static_graph_) return false;
  if (static_graph_ && static_graph_recorded_) return static_globally_unused_[index];
  if (local_used_map_.data<int32_t>()[index] != 0) return false;  // used here: used somewhere
  // Waited for lazily: when every parameter was used locally there is nothing to wait for.
  CollectUsedMap("reducing the used-parameter map");
  return local_used_map_reduced_.data<int32_t>()[index] == 0;
}

// Writes the averaged values back: into .grad (a copy, or the view itself with
// gradient_as_bucket_view). A parameter no rank used keeps its .grad as it was (None stays
// None), so an optimizer skips it; one used by some ranks gets the average with zeros from
// the others.
void Reducer::FinalizeBucket(Bucket& bucket) {
  for (size_t i = 0; i < bucket.variable_indices.size(); ++i) {
    const size_t index = bucket.variable_indices[i];
    if (GloballyUnused(index)) continue;
    const Tensor& param = bucket.variables[i];
    const Tensor& view = bucket.views[i];
    const Tensor& grad = param.grad();
    if (options_.gradient_as_bucket_view) {
      if (!grad.defined()) {
        param.set_grad(view);
      } else {
        DDPKIT_CHECK(grad.IsAliasOf(view), "[ddp] rank ", group_.rank(), ": parameter ", index,
                     " ('", ParamName(index),
                     "') has a .grad that is not its bucket view, but "
                     "gradient_as_bucket_view is on; do not replace .grad (zero it in place or "
                     "set it to none)");
      }
    } else if (!grad.defined()) {
      param.set_grad(view.Clone());
    } else {
      grad.CopyFrom(view);
    }
  }
}

// ============================================================================ rebuild

bool Reducer::RebuildBuckets() {
  if (!ShouldRebuildBuckets() || rebuilt_param_indices_.empty()) return false;
  DDPKIT_INTERNAL_CHECK(rebuilt_param_indices_.size() == params_.size(), "[ddp] rank ",
                        group_.rank(), ": the first iteration recorded ",
                        rebuilt_param_indices_.size(), " gradient arrivals for ", params_.size(),
                        " parameters");
  BucketAssignment assignment =
      RebuiltBucketAssignment(SpecsOf(params_), rebuilt_param_indices_, options_.limits);
  SyncBucketIndices(assignment);
  InstallRebuiltBuckets(assignment);
  TraceIteration(TraceEventType::kRebuild);
  return true;
}

void Reducer::InstallRebuiltBuckets(const BucketAssignment& assignment) {
  has_rebuilt_buckets_ = true;
  rebuilt_param_indices_.clear();
  rebuilt_param_indices_.shrink_to_fit();
  InitializeBuckets(assignment);
  LogRebuild(logging_, group_, params_, buckets_, assignment);
}

// The uninterrupted run's layout, so the resumed run's allreduces sum every element in the
// same order: at >= 3 Gloo ranks the ring's order depends on where an element falls in the flat
// bucket, and a fresh rebuild after a restart would start from the initial layout instead.
absl::Status Reducer::AdoptRebuiltBuckets(const BucketAssignment& plan) {
  if (!ShouldRebuildBuckets()) {
    return absl::FailedPreconditionError(
        "this DDP does not rebuild its buckets (find_unused_parameters without static graph, or "
        "already rebuilt)");
  }
  if (num_iterations_ > 0) {
    return absl::FailedPreconditionError("a rebuilt plan can only be adopted before iterating");
  }
  DDPKIT_RETURN_IF_ERROR(CheckBucketAssignment(SpecsOf(params_), plan));
  InstallRebuiltBuckets(plan);
  return absl::OkStatus();
}

std::optional<BucketAssignment> Reducer::RebuiltPlan() const {
  // A checkpoint after the first step: the resumed run's first step must already use this.
  if (rebuild_pending()) {
    return RebuiltBucketAssignment(SpecsOf(params_), rebuilt_param_indices_, options_.limits);
  }
  if (!has_rebuilt_buckets_) return std::nullopt;
  BucketAssignment plan;
  for (const Bucket& bucket : buckets_) {
    plan.buckets.push_back(bucket.variable_indices);
    plan.limits.push_back(bucket.size_limit);
  }
  return plan;
}

absl::Status Reducer::AdoptStaticGraphRecord(const StaticGraphRecord& record) {
  if (!static_graph_ || static_graph_recorded_ || num_iterations_ > 0) {
    return absl::FailedPreconditionError(
        "a static graph record can only be adopted by a static graph DDP before iterating");
  }
  DDPKIT_RETURN_IF_ERROR(CheckStaticGraphRecord(params_.size(), record));
  expected_hook_counts_.assign(record.hook_counts.begin(), record.hook_counts.end());
  UnusedFromHookCounts();
  static_graph_recorded_ = true;
  static_globally_unused_.assign(params_.size(), 0);
  for (size_t index : record.globally_unused) static_globally_unused_[index] = 1;
  return absl::OkStatus();
}

std::optional<StaticGraphRecord> Reducer::StaticGraphRecorded() const {
  if (!static_graph_ || !static_graph_recorded_) return std::nullopt;
  StaticGraphRecord record;
  record.hook_counts.assign(expected_hook_counts_.begin(), expected_hook_counts_.end());
  for (size_t i = 0; i < params_.size(); ++i) {
    if (static_globally_unused_[i]) record.globally_unused.push_back(i);
  }
  return record;
}

// Rank 0's plan wins, so every rank buckets (and launches) identically even when gradients
// arrived in different orders. PyTorch's two broadcasts, int32: [indices..., bucket count], then
// [each bucket's parameter count]. The limits are not sent: each bucket's is the one its dtype's
// walk had reached (LimitsAlongTheWalk), the same on every rank.
void Reducer::SyncBucketIndices(BucketAssignment& assignment) {
  comm::ScopedCollectiveTag tag({.purpose = "rebuilt_plan"});
  const int64_t n = static_cast<int64_t>(params_.size());
  Tensor flat = Tensor::Zeros({n + 1}, DType::kInt32);
  int32_t* f = flat.data<int32_t>();
  int64_t k = 0;
  for (const auto& bucket : assignment.buckets) {
    for (size_t index : bucket) f[k++] = static_cast<int32_t>(index);
  }
  f[n] = static_cast<int32_t>(assignment.buckets.size());
  if (absl::Status s = group_.Broadcast(flat, 0)->Wait(); !s.ok()) {
    ThrowCommFailure(group_.rank(), "broadcasting rank 0's rebuilt bucket plan", s);
  }
  const int64_t num_buckets = f[n];
  DDPKIT_CHECK(num_buckets >= 1 && num_buckets <= n, "[ddp] rank ", group_.rank(),
               ": rank 0's rebuilt plan has ", num_buckets, " buckets for ", n, " parameters");
  Tensor sizes = Tensor::Zeros({num_buckets}, DType::kInt32);
  int32_t* s = sizes.data<int32_t>();
  if (group_.rank() == 0) {
    for (int64_t b = 0; b < num_buckets; ++b) {
      s[b] = static_cast<int32_t>(assignment.buckets[b].size());
    }
  }
  if (absl::Status st = group_.Broadcast(sizes, 0)->Wait(); !st.ok()) {
    ThrowCommFailure(group_.rank(), "broadcasting rank 0's rebuilt bucket sizes", st);
  }
  BucketAssignment synced;
  std::vector<bool> seen(n, false);
  k = 0;
  for (int64_t b = 0; b < num_buckets; ++b) {
    std::vector<size_t>& bucket = synced.buckets.emplace_back();
    for (int32_t j = 0; j < s[b]; ++j, ++k) {
      DDPKIT_CHECK(k < n && f[k] >= 0 && f[k] < n && !seen[f[k]], "[ddp] rank ", group_.rank(),
                   ": rank 0's rebuilt bucket plan is not a permutation of the ", n,
                   " parameters; do all ranks wrap the same model?");
      seen[f[k]] = true;
      bucket.push_back(static_cast<size_t>(f[k]));
    }
  }
  DDPKIT_CHECK(k == n, "[ddp] rank ", group_.rank(), ": rank 0's rebuilt plan covers ", k, " of ",
               n, " parameters");
  synced.limits = LimitsAlongTheWalk(synced.buckets, SpecsOf(params_), options_.limits.Walk());
  assignment = std::move(synced);
}

// ============================================================================ join

void Reducer::SetJoinCountWork(std::shared_ptr<comm::Work> work, Tensor active_ranks,
                               bool divide_by_initial_world_size) {
  join_count_work_ = std::move(work);
  join_active_ranks_ = std::move(active_ranks);
  divide_by_initial_world_size_ = divide_by_initial_world_size;
}

void Reducer::RebuildBucketsForJoin() {
  if (!ShouldRebuildBuckets()) return;
  if (rebuilt_param_indices_.empty()) {
    for (size_t i = 0; i < params_.size(); ++i) rebuilt_param_indices_.push_back(i);
  }
  RebuildBuckets();
}

// The joined rank takes part exactly as an active rank whose gradients are all zero (and
// which used no parameter), and ends with the same .grad as the active ranks: the averaged
// value where some rank used the parameter, none where no rank did. PyTorch's join hook drops
// the results instead; keeping them lets a joinable that steps after DDP (the ZeRO optimizer
// updating the shard this rank owns) see the gradient the active ranks see.
void Reducer::ShadowBackward(bool first_static_iteration) {
  const Clock::time_point start = Clock::now();
  auto shadow_used_map = [&] {  // this rank used nothing
    local_used_map_.Zero();
    LaunchLocalUsedMapAllreduce();
  };
  if (first_static_iteration) {  // DelayAllReduce's order: the map, the hook counts, buckets
    shadow_used_map();
    std::fill(expected_hook_counts_.begin(), expected_hook_counts_.end(), 0);
    ShareHookCounts("shadowing static graph's hook counts", /*adopt=*/true);
    UnusedFromHookCounts();
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    buckets_[b].gradients.Zero();
    LaunchBucket(b);
  }
  if (!first_static_iteration && dynamic_find_unused()) shadow_used_map();
  CollectUsedMap("shadowing an active rank's used-parameter map");
  if (first_static_iteration) RecordStaticGraphUnused();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    WaitForBucket(b, "shadowing an active rank's reduction of");
    for (size_t index : buckets_[b].variable_indices) {
      if (GloballyUnused(index)) params_[index].second.set_grad(Tensor());
    }
    FinalizeBucket(buckets_[b]);
  }
  local_used_work_.reset();
  timer_.ClearLaunches();
  TraceIteration(TraceEventType::kShadowBackward, Clock::now(), start);
}

// ============================================================================ observability

void Reducer::TraceIteration(TraceEventType type, Clock::time_point time,
                             std::optional<Clock::time_point> start) {
  EmitTrace({.type = type, .time = time, .start = start.value_or(time)});
}

void Reducer::TraceHook(size_t param_index) {
  if (trace_ == nullptr) return;
  const Clock::time_point now = Clock::now();
  EmitTrace({.type = TraceEventType::kHookFired,
             .time = now,
             .start = now,
             .param_index = static_cast<int64_t>(param_index),
             .param_bucket = static_cast<int64_t>(locators_[param_index].bucket_index)});
}

void Reducer::TraceBucket(TraceEventType type, size_t bucket_index, Clock::time_point time) {
  EmitTrace({.type = type,
             .time = time,
             .start = time,
             .bucket_index = static_cast<int64_t>(bucket_index)});
}

// Stamps the iteration and rank on `event` and hands it to the observer, if any.
void Reducer::EmitTrace(TraceEvent event) {
  if (trace_ == nullptr) return;
  event.iteration = num_iterations_;
  event.rank = group_.rank();
  trace_->OnEvent(event);
}

void Reducer::NoteNoSyncForward() { TraceIteration(TraceEventType::kNoSyncForward); }

}  // namespace ddpkit::reducer
