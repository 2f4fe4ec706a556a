// PowerSGD gradient compression as DDP communication hooks, after PyTorch 1.13's
// torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py (Vogels et al., 2019), whose
// numbers the tests match on golden files.
//
// For `start_iteration` synced iterations a hook averages its bucket with a plain allreduce.
// After that, per bucket, `powersgd` (powerSGD_hook):
//  1. error feedback: adds the error this rank kept for the bucket last time, and copies the
//     result (the input);
//  2. views each gradient as an n x m matrix M (n: its first dimension) and compresses it at rank
//     r = min(n, m, rank) when (n + m)·r·min_compression_rate < n·m; the rest (biases, small
//     layers) are packed together, allreduced and averaged uncompressed;
//  3. per compressed M, with Q (m x r) random the first time and last step's afterwards (warm
//     start), Q orthogonalised: P = MQ, allreduce the Ps (summed), orthogonalise each P,
//     Q = MᵀP, allreduce the Qs and average them, M <- PQᵀ;
//  4. error feedback: the bucket's error is the input minus what the bucket now holds — for the
//     uncompressed gradients too, where it is local minus average (PyTorch's quirk, kept).
// `batched_powersgd` (batched_powerSGD_hook) compresses the whole bucket as one square matrix
// instead, zero-padded to side ceil(sqrt(numel)), at rank min(side, rank) (PyTorch fails an
// assert when the side is below the rank), orthogonalising with epsilon 0 as PyTorch's does.
// Matrices are taken in PyTorch's order: grouped by shape, groups in first-appearance order, so
// the Qs are drawn in the same order. Orthogonalisation: orthogonalize.h. The iteration count
// goes up at the last bucket of every synced backward (maybe_increase_iter), when the hook is
// called; PyTorch counts compressed ones when they complete, which is the same count whenever
// a later hook could read it.
//
// Random Q: PyTorch seeds torch.randn with numpy's RandomState(random_seed).randint(1e9), drawn
// once per hook call that needs fresh Qs, so every rank draws the same. ddpkit cannot replay
// torch's generator; it draws the call's seed from its own Generator(random_seed)
// (autograd/random.h) and fills the Qs with `q_initializer` — by default standard normals from
// Generator(seed), the same on every rank. The golden tests inject the Qs torch drew.
//
// Ordering: a hook call issues its allreduces (uncompressed, Ps, Qs) at once, on the rank's
// thread, so every rank issues the same collectives in the same order. The Qs' allreduce is
// queued before MᵀP has been computed into its buffer: that runs on the P allreduce's completion,
// which the process group's one communication thread runs before it starts the next collective
// (comm/process_group.h, comm/work.h).
//
// Memory: every buffer (error, input copy, packed uncompressed gradients, Ps, Qs) is made once
// per bucket; a warm call allocates only its futures. A bucket whose layout changes (a rebuild
// after the start, which start_iteration > 1 rules out) starts afresh: no error, new Qs.
//
// Not here: batch_tensors_with_same_shape (batched matrix products, same numbers),
// compression_stats_logging_frequency (the figures are in DDP's logging data instead), float16
// and bfloat16 buckets (float32 and float64 only).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "autograd/random.h"
#include "comm/process_group.h"
#include "reducer/comm_hook.h"
#include "reducer/ddp_logging.pb.h"

namespace ddpkit::reducer {

class DistributedDataParallel;

// Fills the Qs of one hook call, in order, from the call's seed.
using QInitializer = std::function<void(uint64_t seed, absl::Span<const Tensor> qs)>;

// PyTorch's PowerSGDState arguments (their defaults too).
struct PowerSgdOptions {
  int64_t matrix_approximation_rank = 1;
  int64_t start_iteration = 1000;  // start_powerSGD_iter
  double min_compression_rate = 2;
  bool use_error_feedback = true;
  bool warm_start = true;
  double orthogonalization_epsilon = 0;
  uint64_t random_seed = 0;
  QInitializer q_initializer = {};  // empty: standard normals from Generator(seed)
};

// InvalidArgument for a rank below 1, a negative or non-finite rate or epsilon, or — with error
// feedback or warm start — start_iteration <= 1: DDP rebuilds its buckets at iteration 1, which
// would scramble the error and Qs kept per bucket.
absl::Status ValidatePowerSgdOptions(const PowerSgdOptions& options);

enum class PowerSgdVariant { kLayerwise, kBatched };
std::optional<PowerSgdVariant> PowerSgdVariantFromName(std::string_view name);  // powersgd|...
std::string_view PowerSgdVariantName(PowerSgdVariant variant);  // "powersgd", "batched_powersgd"

// What a PowerSGD hook keeps between calls: the options, the iteration count, the seed
// generator and the figures. Per-bucket buffers belong to the hook.
class PowerSgdState {
 public:
  // Validates `options`.
  static absl::StatusOr<std::shared_ptr<PowerSgdState>> Create(comm::ProcessGroup& group,
                                                               PowerSgdOptions options);

  const PowerSgdOptions& options() const { return options_; }
  comm::ProcessGroup& group() const { return group_; }
  // Synced iterations seen (PyTorch's state.iter): compression runs once it reaches the start.
  int64_t iteration() const { return iteration_; }
  bool compressing() const { return iteration_ >= options_.start_iteration; }

  // The last synced iteration's figures (complete once its backward ended), and PyTorch's
  // compression_stats() totals.
  CompressionStats Stats() const;

  // --- For the hooks ------------------------------------------------------------------------
  // A hook call for `bucket` starts: a new step's figures begin at bucket 0.
  void BeginCall(const GradBucket& bucket);
  // The call's allreduced bytes, and PyTorch's element counts before and after compression.
  void CountWire(int64_t bytes) { step_wire_bytes_ += bytes; }
  void CountCompression(int64_t numel_before, int64_t numel_after);
  // maybe_increase_iter: after the last bucket of a synced backward.
  void EndCall(const GradBucket& bucket);
  // Fills `qs` for a call that needs fresh Qs: draws the call's seed even when `qs` is empty,
  // as PyTorch does.
  void InitializeQs(absl::Span<const Tensor> qs);

 private:
  PowerSgdState(comm::ProcessGroup& group, PowerSgdOptions options);

  comm::ProcessGroup& group_;
  PowerSgdOptions options_;
  Generator seeds_;
  int64_t iteration_ = 0;
  // Touched on the rank's thread only (hook calls, and logging after backward).
  int64_t step_wire_bytes_ = 0, step_bucket_bytes_ = 0;  // this step's, from bucket 0 on
  int64_t numel_before_ = 0, numel_after_ = 0;
};

// The hooks, over `state` (one state per hook, as in PyTorch).
CommHook MakePowerSgdHook(std::shared_ptr<PowerSgdState> state);
CommHook MakeBatchedPowerSgdHook(std::shared_ptr<PowerSgdState> state);

// Registers the variant's hook on `ddp` (before its first iteration), its figures reported in
// the logging data's `compression` after every synced backward. Returns the state (for tests).
absl::StatusOr<std::shared_ptr<PowerSgdState>> RegisterPowerSgdHook(DistributedDataParallel& ddp,
                                                                    PowerSgdVariant variant,
                                                                    PowerSgdOptions options);

}  // namespace ddpkit::reducer
