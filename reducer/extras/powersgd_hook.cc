#include "reducer/extras/powersgd_hook.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "autograd/gemm.h"
#include "autograd/kernels.h"
#include "reducer/distributed_data_parallel.h"
#include "reducer/extras/orthogonalize.h"

namespace ddpkit::reducer {
namespace {

// dst = a - b.
void Difference(const Tensor& dst, const Tensor& a, const Tensor& b) {
  DispatchFloating(dst.dtype(), "Difference", [&]<typename T>() {
    T* out = dst.data<T>();
    const T* x = a.data<T>();
    const T* y = b.data<T>();
    for (int64_t i = 0, n = dst.numel(); i < n; ++i) out[i] = x[i] - y[i];
  });
}

void FillStandardNormal(Generator& generator, const Tensor& t) {
  DispatchFloating(t.dtype(), "FillStandardNormal", [&]<typename T>() {
    T* values = t.data<T>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) values[i] = static_cast<T>(generator.Normal());
  });
}

std::shared_ptr<comm::Future> Allreduce(comm::ProcessGroup& group, const Tensor& t) {
  return comm::Future::FromWork(group.Allreduce(t), t);
}

std::shared_ptr<comm::Future> Failed(absl::Status status) {
  auto future = std::make_shared<comm::Future>();
  future->SetError(std::move(status));
  return future;
}

// An earlier stage of the same call: complete by now (its collective ran first), so this never
// blocks; its error, if any, becomes the caller's.
void ThrowIfFailed(const std::shared_ptr<comm::Future>& stage) {
  if (stage == nullptr) return;
  DDPKIT_INTERNAL_CHECK(stage->IsCompleted(), "[powersgd] a stage's future is not complete");
  if (absl::StatusOr<Tensor> result = stage->Wait(); !result.ok()) ThrowStatus(result.status());
}

absl::Status CheckDtype(const GradBucket& bucket, std::string_view hook) {
  const DType dtype = bucket.buffer().dtype();
  if (dtype == DType::kFloat32 || dtype == DType::kFloat64) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat("the ", hook, " hook takes float32 and float64 ",
                                           "gradients only; bucket ", bucket.index(), " holds ",
                                           DTypeName(dtype)));
}

// Before start_iteration: PyTorch's default allreduce (divide, then sum).
std::shared_ptr<comm::Future> PlainAllreduce(PowerSgdState& state, GradBucket& bucket) {
  DivideInPlace(bucket.buffer(), state.group().size());
  state.CountWire(static_cast<int64_t>(bucket.buffer().nbytes()));
  return Allreduce(state.group(), bucket.buffer());
}

// A flat buffer's elements [begin, begin + rows * cols) as a rows x cols matrix.
Tensor MatrixAt(const Tensor& flat, int64_t begin, int64_t rows, int64_t cols) {
  return flat.Rows(begin, begin + rows * cols).View({rows, cols});
}

// ============================================================================ both variants

// What both variants do per call: refuse a half-precision bucket, average plainly before the
// start iteration, else compress with the bucket's plan — made at its first compressed call,
// and afresh when the bucket's buffer changed (a rebuild). `Plan` records the buffer it was
// made for in `data` and `numel`.
template <typename Plan>
class PowerSgdHookBase : public std::enable_shared_from_this<PowerSgdHookBase<Plan>> {
 public:
  PowerSgdHookBase(std::shared_ptr<PowerSgdState> state, std::string_view name)
      : state_(std::move(state)), name_(name) {}
  virtual ~PowerSgdHookBase() = default;

  std::shared_ptr<comm::Future> Call(GradBucket& bucket) {
    state_->BeginCall(bucket);
    std::shared_ptr<comm::Future> result;
    if (absl::Status s = CheckDtype(bucket, name_); !s.ok()) {
      result = Failed(std::move(s));
    } else if (!state_->compressing()) {
      result = PlainAllreduce(*state_, bucket);
    } else {
      result = Compress(bucket, PlanFor(bucket));
    }
    state_->EndCall(bucket);
    return result;
  }

 protected:
  virtual std::unique_ptr<Plan> MakePlan(const GradBucket& bucket) = 0;
  // Steps 1-3 on this thread up to the launches; the rest as each allreduce completes.
  virtual std::shared_ptr<comm::Future> Compress(GradBucket& bucket, Plan& b) = 0;

  std::shared_ptr<PowerSgdState> state_;

 private:
  Plan& PlanFor(const GradBucket& bucket) {
    if (plans_.size() < bucket.bucket_count()) plans_.resize(bucket.bucket_count());
    std::unique_ptr<Plan>& b = plans_[bucket.index()];
    if (b == nullptr || b->data != bucket.buffer().raw_data() ||
        b->numel != bucket.buffer().numel()) {
      b = MakePlan(bucket);
    }
    return *b;
  }

  std::string_view name_;
  std::vector<std::unique_ptr<Plan>> plans_;  // by bucket index; stable addresses
};

// ============================================================================ layerwise

// One compressed gradient: M ≈ P Qᵀ.
struct Factor {
  Tensor m;     // n x cols, a view of the gradient in the bucket
  Tensor p, q;  // n x r and cols x r, views into the bucket's P and Q memory
};

// A bucket's plan and buffers, made at its first compressed call.
struct LayerwiseBucket {
  const void* data = nullptr;  // the buffer planned for (a rebuild gives a new one)
  int64_t numel = -1;
  std::vector<Factor> factors;       // PyTorch's order: grouped by shape
  std::vector<Tensor> qs;            // the factors' q, for the initializer
  std::vector<Tensor> uncompressed;  // flat views of the other gradients, bucket order
  Tensor packed;                     // the uncompressed gradients, contiguous
  Tensor p_memory, q_memory;         // every P, every Q
  Tensor error, input;               // error feedback
  int64_t numel_before = 0, numel_after = 0;
  bool has_error = false, has_q = false;
};

struct Shape2d {
  int64_t rows, cols;
  bool operator==(const Shape2d&) const = default;
};

// A gradient as PyTorch views it: its first dimension by the rest.
Shape2d MatrixShape(const Tensor& gradient) {
  const int64_t rows = gradient.dim() == 0 ? 1 : gradient.size(0);
  return {rows, rows == 0 ? 0 : gradient.numel() / rows};
}

std::unique_ptr<LayerwiseBucket> PlanLayerwise(const GradBucket& bucket,
                                               const PowerSgdOptions& options) {
  auto plan = std::make_unique<LayerwiseBucket>();
  plan->data = bucket.buffer().raw_data();
  plan->numel = bucket.buffer().numel();
  const DType dtype = bucket.buffer().dtype();
  std::vector<std::pair<Shape2d, std::vector<Tensor>>> groups;  // first-appearance order
  int64_t packed = 0, p_numel = 0, q_numel = 0;
  for (const Tensor& gradient : bucket.gradients()) {
    const auto [n, m] = MatrixShape(gradient);
    const int64_t r = std::min({n, m, options.matrix_approximation_rank});
    const bool compress =
        gradient.numel() > 0 && static_cast<double>((n + m) * r) * options.min_compression_rate <
                                    static_cast<double>(n * m);
    plan->numel_before += n * m;
    plan->numel_after += compress ? (n + m) * r : n * m;
    if (!compress) {
      plan->uncompressed.push_back(gradient.Flatten());
      packed += gradient.numel();
      continue;
    }
    auto group = std::find_if(groups.begin(), groups.end(), [&](const auto& g) {
      return g.first == Shape2d{n, m};
    });
    if (group == groups.end()) group = groups.insert(groups.end(), {Shape2d{n, m}, {}});
    group->second.push_back(gradient.View({n, m}));
    p_numel += n * r;
    q_numel += m * r;
  }
  plan->packed = Tensor::Empty({packed}, dtype);
  plan->p_memory = Tensor::Empty({p_numel}, dtype);
  plan->q_memory = Tensor::Empty({q_numel}, dtype);
  int64_t p_at = 0, q_at = 0;
  for (const auto& [shape, matrices] : groups) {
    const int64_t r = std::min({shape.rows, shape.cols, options.matrix_approximation_rank});
    for (const Tensor& m : matrices) {
      plan->factors.push_back({.m = m,
                               .p = MatrixAt(plan->p_memory, p_at, shape.rows, r),
                               .q = MatrixAt(plan->q_memory, q_at, shape.cols, r)});
      plan->qs.push_back(plan->factors.back().q);
      p_at += shape.rows * r;
      q_at += shape.cols * r;
    }
  }
  if (options.use_error_feedback) {
    plan->error = Tensor::Empty({plan->numel}, dtype);
    plan->input = Tensor::Empty({plan->numel}, dtype);
  }
  return plan;
}

// Copies between the uncompressed gradients and their packed buffer (bytes: no view per call).
void Pack(const LayerwiseBucket& b) {
  auto* out = static_cast<std::byte*>(b.packed.raw_data());
  for (const Tensor& t : b.uncompressed) {
    out = std::copy_n(static_cast<const std::byte*>(t.raw_data()), t.nbytes(), out);
  }
}

void Unpack(const LayerwiseBucket& b) {
  const auto* in = static_cast<const std::byte*>(b.packed.raw_data());
  for (const Tensor& t : b.uncompressed) {
    std::copy_n(in, t.nbytes(), static_cast<std::byte*>(t.raw_data()));
    in += t.nbytes();
  }
}

class LayerwiseHook final : public PowerSgdHookBase<LayerwiseBucket> {
 public:
  explicit LayerwiseHook(std::shared_ptr<PowerSgdState> state)
      : PowerSgdHookBase(std::move(state), "powersgd") {}

 private:
  std::unique_ptr<LayerwiseBucket> MakePlan(const GradBucket& bucket) override {
    return PlanLayerwise(bucket, state_->options());
  }

  std::shared_ptr<comm::Future> Compress(GradBucket& bucket, LayerwiseBucket& b) override {
    const PowerSgdOptions& options = state_->options();
    const Tensor& buffer = bucket.buffer();
    state_->CountCompression(b.numel_before, b.numel_after);
    if (options.use_error_feedback) {
      if (b.has_error) AddInPlace(buffer, b.error);
      b.has_error = true;
      b.input.CopyFrom(buffer);
    }
    Pack(b);
    if (!options.warm_start || !b.has_q) state_->InitializeQs(b.qs);
    b.has_q = options.warm_start;
    for (const Factor& f : b.factors) {
      Orthogonalize(f.q, options.orthogonalization_epsilon);
      Gemm(false, false, f.m.size(0), f.q.size(1), f.m.size(1), 1, f.m, f.q, 0, f.p);  // P = MQ
    }
    state_->CountWire(
        static_cast<int64_t>(b.packed.nbytes() + b.p_memory.nbytes() + b.q_memory.nbytes()));
    return Launch(b, buffer);
  }

  std::shared_ptr<comm::Future> Launch(LayerwiseBucket& b, const Tensor& buffer) {
    comm::ProcessGroup& group = state_->group();
    const double world = group.size();
    const double epsilon = state_->options().orthogonalization_epsilon;
    auto self = this->shared_from_this();
    std::shared_ptr<comm::Future> unpacked, last;
    if (!b.uncompressed.empty()) {
      unpacked = Allreduce(group, b.packed)->Then([self, &b, world](const Tensor& packed) {
        DivideInPlace(packed, world);
        Unpack(b);
        return packed;
      });
      last = unpacked;
    }
    if (!b.factors.empty()) {
      // Runs before the Qs' allreduce starts (see the header): fills the buffer it sends.
      auto projected = Allreduce(group, b.p_memory)->Then([self, &b, epsilon](const Tensor& p) {
        for (const Factor& f : b.factors) {
          Orthogonalize(f.p, epsilon);
          Gemm(true, false, f.m.size(1), f.p.size(1), f.m.size(0), 1, f.m, f.p, 0, f.q);  // MᵀP
        }
        return p;
      });
      last = Allreduce(group, b.q_memory)->Then([self, &b, world, projected](const Tensor& q) {
        ThrowIfFailed(projected);
        DivideInPlace(q, world);
        for (const Factor& f : b.factors) {
          Gemm(false, true, f.m.size(0), f.m.size(1), f.p.size(1), 1, f.p, f.q, 0, f.m);  // PQᵀ
        }
        return q;
      });
    }
    const bool feedback = state_->options().use_error_feedback;
    std::shared_ptr<comm::Future> earlier = last == unpacked ? nullptr : unpacked;
    return last->Then([self, &b, buffer, earlier, feedback](const Tensor&) {
      ThrowIfFailed(earlier);
      if (feedback) Difference(b.error, b.input, buffer);
      return buffer;
    });
  }
};

// ============================================================================ batched

// A bucket as one side x side matrix, zero-padded.
struct BatchedBucket {
  const void* data = nullptr;
  int64_t numel = -1;
  Tensor flat;        // side * side
  Tensor matrix;      // flat as side x side
  Tensor head, tail;  // flat's first numel elements (the bucket), the padding
  Tensor p, q;        // side x r
  std::vector<Tensor> qs;
  Tensor error, input;  // padded, as PyTorch's
  bool has_error = false, has_q = false;
};

int64_t SquareSide(int64_t numel) {
  auto side = static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(numel))));
  while (side * side < numel) ++side;
  while (side > 0 && (side - 1) * (side - 1) >= numel) --side;
  return side;
}

std::unique_ptr<BatchedBucket> PlanBatched(const GradBucket& bucket,
                                           const PowerSgdOptions& options) {
  auto plan = std::make_unique<BatchedBucket>();
  plan->data = bucket.buffer().raw_data();
  plan->numel = bucket.buffer().numel();
  const DType dtype = bucket.buffer().dtype();
  const int64_t side = SquareSide(plan->numel);
  const int64_t r = std::min(side, options.matrix_approximation_rank);
  plan->flat = Tensor::Empty({side * side}, dtype);
  plan->matrix = plan->flat.View({side, side});
  plan->head = plan->flat.Rows(0, plan->numel);
  plan->tail = plan->flat.Rows(plan->numel, side * side);
  plan->p = Tensor::Empty({side, r}, dtype);
  plan->q = Tensor::Empty({side, r}, dtype);
  plan->qs = {plan->q};
  if (options.use_error_feedback) {
    plan->error = Tensor::Empty({side * side}, dtype);
    plan->input = Tensor::Empty({side * side}, dtype);
  }
  return plan;
}

class BatchedHook final : public PowerSgdHookBase<BatchedBucket> {
 public:
  explicit BatchedHook(std::shared_ptr<PowerSgdState> state)
      : PowerSgdHookBase(std::move(state), "batched_powersgd") {}

 private:
  std::unique_ptr<BatchedBucket> MakePlan(const GradBucket& bucket) override {
    return PlanBatched(bucket, state_->options());
  }

  // PyTorch's batched hook orthogonalises with epsilon 0, whatever the options say.
  std::shared_ptr<comm::Future> Compress(GradBucket& bucket, BatchedBucket& b) override {
    const PowerSgdOptions& options = state_->options();
    const int64_t side = b.matrix.size(0), r = b.q.size(1);
    state_->CountCompression(b.numel, side * r * 2);
    b.head.CopyFrom(bucket.buffer());
    b.tail.Zero();
    if (options.use_error_feedback) {
      if (b.has_error) AddInPlace(b.flat, b.error);
      b.has_error = true;
      b.input.CopyFrom(b.flat);
    }
    if (!options.warm_start || !b.has_q) state_->InitializeQs(b.qs);
    b.has_q = options.warm_start;
    Orthogonalize(b.q);
    Gemm(false, false, side, r, side, 1, b.matrix, b.q, 0, b.p);  // P = MQ
    state_->CountWire(static_cast<int64_t>(b.p.nbytes() + b.q.nbytes()));
    return Launch(b, bucket.buffer());
  }

  std::shared_ptr<comm::Future> Launch(BatchedBucket& b, const Tensor& buffer) {
    comm::ProcessGroup& group = state_->group();
    const double world = group.size();
    const bool feedback = state_->options().use_error_feedback;
    auto self = this->shared_from_this();
    // Runs before the Q allreduce starts (see the header): fills the buffer it sends.
    auto projected = Allreduce(group, b.p)->Then([self, &b](const Tensor& p) {
      Orthogonalize(b.p);
      Gemm(true, false, b.q.size(0), b.q.size(1), b.p.size(0), 1, b.matrix, b.p, 0, b.q);  // MᵀP
      return p;
    });
    return Allreduce(group, b.q)
        ->Then([self, &b, buffer, projected, world, feedback](const Tensor&) {
          ThrowIfFailed(projected);
          DivideInPlace(b.q, world);
          Gemm(false, true, b.p.size(0), b.q.size(0), b.p.size(1), 1, b.p, b.q, 0,
               b.matrix);  // PQᵀ
          if (feedback) Difference(b.error, b.input, b.flat);
          buffer.CopyFrom(b.head);
          return buffer;
        });
  }
};

}  // namespace

// ============================================================================ options, state

absl::Status ValidatePowerSgdOptions(const PowerSgdOptions& options) {
  if (options.matrix_approximation_rank < 1) {
    return absl::InvalidArgumentError(StrCat("PowerSGD's matrix approximation rank must be >= 1, ",
                                             "got ", options.matrix_approximation_rank));
  }
  if (!std::isfinite(options.min_compression_rate) || options.min_compression_rate < 0) {
    return absl::InvalidArgumentError(StrCat("PowerSGD's min compression rate must be finite and ",
                                             ">= 0, got ", options.min_compression_rate));
  }
  if (!std::isfinite(options.orthogonalization_epsilon) || options.orthogonalization_epsilon < 0) {
    return absl::InvalidArgumentError(StrCat("PowerSGD's orthogonalization epsilon must be finite ",
                                             "and >= 0, got ", options.orthogonalization_epsilon));
  }
  if (options.start_iteration < 0) {
    return absl::InvalidArgumentError(
        StrCat("PowerSGD's start iteration must be >= 0, got ", options.start_iteration));
  }
  if ((options.use_error_feedback || options.warm_start) && options.start_iteration <= 1) {
    return absl::InvalidArgumentError(StrCat(
        "PowerSGD's start iteration must be > 1 with error feedback or warm start, got ",
        options.start_iteration,
        ": DDP rebuilds its buckets at iteration 1, and the error and Qs kept per bucket would "
        "no longer fit them"));
  }
  return absl::OkStatus();
}

std::optional<PowerSgdVariant> PowerSgdVariantFromName(std::string_view name) {
  if (name == "powersgd") return PowerSgdVariant::kLayerwise;
  if (name == "batched_powersgd") return PowerSgdVariant::kBatched;
  return std::nullopt;
}

std::string_view PowerSgdVariantName(PowerSgdVariant variant) {
  return variant == PowerSgdVariant::kLayerwise ? "powersgd" : "batched_powersgd";
}

PowerSgdState::PowerSgdState(comm::ProcessGroup& group, PowerSgdOptions options)
    : group_(group), options_(std::move(options)), seeds_(options_.random_seed) {}

absl::StatusOr<std::shared_ptr<PowerSgdState>> PowerSgdState::Create(comm::ProcessGroup& group,
                                                                     PowerSgdOptions options) {
  DDPKIT_RETURN_IF_ERROR(ValidatePowerSgdOptions(options));
  return std::shared_ptr<PowerSgdState>(new PowerSgdState(group, std::move(options)));
}

CompressionStats PowerSgdState::Stats() const {
  CompressionStats stats;
  stats.set_wire_bytes_per_step(step_wire_bytes_);
  stats.set_allreduce_bytes_per_step(step_bucket_bytes_);
  stats.set_compression_ratio(step_wire_bytes_ > 0 ? static_cast<double>(step_bucket_bytes_) /
                                                         static_cast<double>(step_wire_bytes_)
                                                   : 0);
  stats.set_numel_before_compression(numel_before_);
  stats.set_numel_after_compression(numel_after_);
  stats.set_compress_rate(numel_after_ > 0 ? static_cast<double>(numel_before_) /
                                                 static_cast<double>(numel_after_)
                                           : 0);
  stats.set_start_iteration(options_.start_iteration);
  stats.set_matrix_approximation_rank(options_.matrix_approximation_rank);
  return stats;
}

void PowerSgdState::BeginCall(const GradBucket& bucket) {
  if (bucket.index() == 0) step_wire_bytes_ = step_bucket_bytes_ = 0;
  step_bucket_bytes_ += static_cast<int64_t>(bucket.buffer().nbytes());
}

void PowerSgdState::CountCompression(int64_t numel_before, int64_t numel_after) {
  numel_before_ += numel_before;
  numel_after_ += numel_after;
}

void PowerSgdState::EndCall(const GradBucket& bucket) {
  if (bucket.is_last()) ++iteration_;
}

void PowerSgdState::InitializeQs(absl::Span<const Tensor> qs) {
  const uint64_t seed = seeds_.NextU64() % 1'000'000'000;  // numpy's randint(1_000_000_000)
  if (options_.q_initializer) {
    options_.q_initializer(seed, qs);
    return;
  }
  Generator generator(seed);
  for (const Tensor& q : qs) FillStandardNormal(generator, q);
}

// ============================================================================ hooks

CommHook MakePowerSgdHook(std::shared_ptr<PowerSgdState> state) {
  auto hook = std::make_shared<LayerwiseHook>(std::move(state));
  return [hook](GradBucket& bucket) { return hook->Call(bucket); };
}

CommHook MakeBatchedPowerSgdHook(std::shared_ptr<PowerSgdState> state) {
  auto hook = std::make_shared<BatchedHook>(std::move(state));
  return [hook](GradBucket& bucket) { return hook->Call(bucket); };
}

absl::StatusOr<std::shared_ptr<PowerSgdState>> RegisterPowerSgdHook(DistributedDataParallel& ddp,
                                                                    PowerSgdVariant variant,
                                                                    PowerSgdOptions options) {
  // The compression (Gram-Schmidt, LAPACK QR, the error-feedback state) runs on the host.
  for (const Tensor& p : ddp.module().Parameters()) {
    if (!p.is_cuda()) continue;
    return absl::InvalidArgumentError(
        StrCat("the ", PowerSgdVariantName(variant),
               " comm hook computes on the host, and the "
               "model is on ",
               p.device().ToString(),
               ": use --device cpu with it, or the allreduce, fp16 or bf16 hooks on the GPU"));
  }
  DDPKIT_ASSIGN_OR_RETURN(std::shared_ptr<PowerSgdState> state,
                          PowerSgdState::Create(ddp.process_group(), std::move(options)));
  CommHook hook = variant == PowerSgdVariant::kLayerwise ? MakePowerSgdHook(state)
                                                         : MakeBatchedPowerSgdHook(state);
  ddp.RegisterCommHook(std::move(hook), std::string(PowerSgdVariantName(variant)),
                       [state] { return state->Stats(); });
  return state;
}

}  // namespace ddpkit::reducer
