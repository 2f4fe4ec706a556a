#include "tools/join_runner.h"

#include <algorithm>
#include <cmath>
#include <mutex>

#include "absl/strings/str_format.h"
#include "autograd/error.h"
#include "autograd/grad_mode.h"
#include "autograd/nn.h"
#include "autograd/ops.h"
#include "autograd/optim.h"
#include "autograd/safetensors.h"
#include "join/join.h"
#include "reducer/zero_redundancy_optimizer.h"
#include "tools/comm_flags.h"
#include "tools/dataset.h"

namespace ddpkit::tools {

namespace {

// One collective as a flight recorder saw it.
struct CollectiveRecord {
  comm::OpType op = comm::OpType::kAllreduce;
  comm::ReduceOp reduce_op = comm::ReduceOp::kSum;
  int root = 0;
  DType dtype = DType::kFloat32;
  int64_t count = 0;
  // "ALLREDUCE int64[1] SUM", "BROADCAST float32[96] from 1".
  std::string Describe() const {
    std::string out = absl::StrFormat("%s %s[%d]", OpTypeName(op), DTypeName(dtype), count);
    if (op == comm::OpType::kAllreduce || op == comm::OpType::kReduceScatter) {
      StrAppend(&out, " ", comm::ReduceOpName(reduce_op));
    } else if (op == comm::OpType::kBroadcast) {
      StrAppend(&out, " from ", root);
    }
    return out;
  }
};

// Collectives per iteration and role that the report keeps; more are cut off.
constexpr int kMaxRecorded = 64;
constexpr int kWordsPerCollective = 5;
constexpr int kRoleWords = 1 + kMaxRecorded * kWordsPerCollective;  // count, then records

// Reads a rank's flight recorder incrementally: the collectives issued since the last call.
class CollectiveTap {
 public:
  explicit CollectiveTap(const comm::ProcessGroup& group) : group_(group) { Take(); }
  std::vector<CollectiveRecord> Take() {
    std::vector<CollectiveRecord> out;
    for (const auto& e : group_.flight_recorder().Entries()) {
      if (e.sequence_number <= last_seen_) continue;
      last_seen_ = e.sequence_number;
      out.push_back({.op = e.op,
                     .reduce_op = e.reduce_op,
                     .root = e.root,
                     .dtype = e.dtype,
                     .count = e.count});
    }
    return out;
  }

 private:
  const comm::ProcessGroup& group_;
  uint64_t last_seen_ = 0;
};

// A joinable without collectives of its own: its hook, listed last, runs after DDP's (and the
// optimizer's) in each shadowed iteration and records what they issued.
class ShadowRecorder final : public join::Joinable {
 public:
  ShadowRecorder(comm::ProcessGroup& group, std::function<void()> on_iteration)
      : group_(group), on_iteration_(std::move(on_iteration)) {}
  std::unique_ptr<join::JoinHook> MakeJoinHook() override {
    struct Hook final : join::JoinHook {
      explicit Hook(ShadowRecorder& r) : recorder(r) {}
      void MainHook() override { recorder.on_iteration_(); }
      ShadowRecorder& recorder;
    };
    return std::make_unique<Hook>(*this);
  }
  comm::ProcessGroup& join_process_group() const override { return group_; }

 private:
  comm::ProcessGroup& group_;
  std::function<void()> on_iteration_;
};

void Encode(const std::vector<CollectiveRecord>& records, int64_t* words) {
  const int n = std::min<int>(static_cast<int>(records.size()), kMaxRecorded);
  words[0] = n;
  for (int i = 0; i < n; ++i) {
    int64_t* w = words + 1 + i * kWordsPerCollective;
    const CollectiveRecord& r = records[i];
    w[0] = static_cast<int64_t>(r.op);
    w[1] = static_cast<int64_t>(r.reduce_op);
    w[2] = r.root;
    w[3] = static_cast<int64_t>(r.dtype);
    w[4] = r.count;
  }
}

void Decode(const int64_t* words, google::protobuf::RepeatedPtrField<std::string>* out) {
  for (int64_t i = 0; i < words[0]; ++i) {
    const int64_t* w = words + 1 + i * kWordsPerCollective;
    const CollectiveRecord r{.op = static_cast<comm::OpType>(w[0]),
                             .reduce_op = static_cast<comm::ReduceOp>(w[1]),
                             .root = static_cast<int>(w[2]),
                             .dtype = static_cast<DType>(w[3]),
                             .count = w[4]};
    out->Add(r.Describe());
  }
}

double GradNorm(const nn::Module& model) {
  double sum = 0;
  for (const Tensor& p : model.Parameters()) {
    if (!p.grad().defined()) continue;
    for (double g : p.grad().ToDoubles()) sum += g * g;
  }
  return std::sqrt(sum);
}

// FNV-1a over the parameters' bytes, kept positive so MAX of (h, -h) compares cleanly.
int64_t ModelHash(const nn::Module& model) {
  uint64_t h = 1469598103934665603ull;
  for (const Tensor& p : model.Parameters()) {
    const auto* bytes = static_cast<const unsigned char*>(p.raw_data());
    for (size_t i = 0; i < p.nbytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  }
  return static_cast<int64_t>(h >> 2);
}

void CheckOk(const absl::Status& s, std::string_view what, int rank) {
  if (!s.ok())
    throw Error(StrCat("[join] rank ", rank, ": ", what, " failed: ", s.message()), s.code());
}

absl::Status Validate(const JoinRunConfig& config) {
  if (config.batch_size <= 0) {
    return absl::InvalidArgumentError(
        StrCat("--batch-size must be positive, got ", config.batch_size));
  }
  if (config.lr < 0)
    return absl::InvalidArgumentError(StrCat("--lr must be >= 0, got ", config.lr));
  if (config.optimizer != "sgd" && config.optimizer != "zero-sgd") {
    return absl::InvalidArgumentError(
        StrCat("--optimizer must be sgd or zero-sgd, got '", config.optimizer, "'"));
  }
  if (config.data_prefix.empty() == config.inputs.empty()) {
    return absl::InvalidArgumentError(
        "give exactly one of --inputs N0,N1,... (iterations per rank on synthetic rows) or "
        "--data-per-rank PREFIX (rank r reads PREFIX.rank<r>.safetensors)");
  }
  for (size_t r = 0; r < config.inputs.size(); ++r) {
    if (config.inputs[r] < 0) {
      return absl::InvalidArgumentError(StrCat("--inputs: rank ", r, " has ", config.inputs[r],
                                               " iterations; counts must be >= 0"));
    }
  }
  if (config.backend == "threads") {
    if (!config.inputs.empty() && config.world_size != 0 &&
        config.world_size != static_cast<int>(config.inputs.size())) {
      return absl::InvalidArgumentError(StrCat("--inputs lists ", config.inputs.size(),
                                               " ranks but --world-size is ", config.world_size));
    }
    if (config.inputs.empty() && config.world_size < 1) {
      return absl::InvalidArgumentError(
          "--data-per-rank needs --world-size (the number of rank files)");
    }
  }
  if (!config.comm_hook.empty()) {
    DDPKIT_RETURN_IF_ERROR(reducer::ParseBuiltinCommHook(config.comm_hook).status());
  }
  return absl::OkStatus();
}

// One rank's run. Throws ddpkit::Error for failed collectives; returns errors for bad input.
absl::StatusOr<JoinReport> RunOnRank(const JoinRunConfig& config,
                                     const std::vector<int64_t>& widths,
                                     comm::ProcessGroup& group) {
  const int rank = group.rank(), world = group.size();
  const int64_t features = widths.front(), classes = widths.back(), b = config.batch_size;
  if (!config.inputs.empty() && static_cast<int>(config.inputs.size()) != world) {
    return absl::InvalidArgumentError(
        StrCat("--inputs lists ", config.inputs.size(), " ranks but the world has ", world));
  }

  // This rank's rows and iteration count; then every rank learns every count.
  ClassificationData data;
  int my_iterations = 0;
  if (config.data_prefix.empty()) {
    int64_t before = 0, total = 0;
    for (int r = 0; r < world; ++r) {
      if (r < rank) before += config.inputs[r];
      total += config.inputs[r];
    }
    ClassificationData all = MakeSyntheticClassification(std::max<int64_t>(1, total * b), features,
                                                         classes, config.seed + 1);
    my_iterations = config.inputs[rank];
    data.x = Tensor::Empty({std::max<int64_t>(1, my_iterations * b), features});
    data.y = Tensor::Empty({data.x.size(0)}, DType::kInt64);
    GatherRows(all, before * b, data.x.size(0), data.x, data.y);
    data.description = absl::StrFormat(
        "synthetic (seed %d, %d rows per iteration per rank, no row shared)", config.seed, b);
  } else {
    const std::string path = StrCat(config.data_prefix, ".rank", rank, ".safetensors");
    absl::StatusOr<ClassificationData> loaded = LoadClassificationData(path, features, classes);
    if (!loaded.ok()) {
      return absl::Status(loaded.status().code(),
                          StrCat("rank ", rank, ": ", loaded.status().message()));
    }
    data = *std::move(loaded);
    my_iterations = static_cast<int>(data.rows() / b);
    data.description = StrCat(config.data_prefix, ".rank<r>.safetensors");
  }
  Tensor counts = Tensor::Zeros({world}, DType::kInt64);
  counts.data<int64_t>()[rank] = my_iterations;
  CheckOk(group.Allreduce(counts)->Wait(), "sharing the iteration counts", rank);
  std::vector<int> inputs(world);
  for (int r = 0; r < world; ++r) inputs[r] = static_cast<int>(counts.data<int64_t>()[r]);
  const int most = *std::max_element(inputs.begin(), inputs.end());
  const int fewest = *std::min_element(inputs.begin(), inputs.end());

  auto model = nn::MakeMlp(widths, config.seed);
  if (!config.weights_path.empty())
    DDPKIT_RETURN_IF_ERROR(LoadStateDict(*model, config.weights_path));
  DDPKIT_ASSIGN_OR_RETURN(std::shared_ptr<reducer::DistributedDataParallel> ddp,
                          reducer::DistributedDataParallel::Create(model, group, config.ddp));
  if (!config.comm_hook.empty())
    ddp->RegisterBuiltinCommHook(*reducer::ParseBuiltinCommHook(config.comm_hook));
  ddp->set_divide_by_initial_world_size(config.divide_by_initial_world_size);

  std::unique_ptr<Optimizer> optimizer;
  reducer::ZeroRedundancyOptimizer* zero = nullptr;
  const SgdOptions sgd{.lr = config.lr, .momentum = config.momentum};
  if (config.optimizer == "zero-sgd") {
    DDPKIT_ASSIGN_OR_RETURN(std::unique_ptr<reducer::ZeroRedundancyOptimizer> z,
                            reducer::ZeroRedundancyOptimizer::Create(
                                model->NamedParameters(), group, reducer::MakeSgdFactory(sgd)));
    zero = z.get();
    optimizer = std::move(z);
  } else {
    optimizer = std::make_unique<Sgd>(model->Parameters(), sgd);
  }

  // Per iteration: [loss sum, grad norm, divide factor], and per role the collectives.
  Tensor numbers = Tensor::Zeros({std::max(1, most), 3}, DType::kFloat64);
  Tensor collectives = Tensor::Zeros({std::max(1, most), 2, kRoleWords}, DType::kInt64);
  auto lowest = [&](int t, bool active) {
    for (int r = 0; r < world; ++r) {
      if ((inputs[r] > t) == active) return r;
    }
    return -1;
  };
  auto record = [&](int t, int role, const std::vector<CollectiveRecord>& list) {
    if (t < most) Encode(list, collectives.data<int64_t>() + (t * 2 + role) * kRoleWords);
  };
  CollectiveTap tap(group);
  int shadowed = 0;
  ShadowRecorder shadow_recorder(group, [&] {
    const int t = my_iterations + shadowed++;
    std::vector<CollectiveRecord> list = tap.Take();
    if (lowest(t, false) == rank) record(t, 1, list);
  });

  Tensor x = Tensor::Empty({b, features});
  Tensor y = Tensor::Empty({b}, DType::kInt64);
  int t = 0;
  auto train_loop = [&] {
    for (t = 0; t < my_iterations; ++t) {
      optimizer->ZeroGrad();
      GatherRows(data, t * b, b, x, y);
      Tensor loss = CrossEntropy(ddp->Forward(x), y);
      loss.Backward();
      double* n = numbers.data<double>() + t * 3;
      n[0] = loss.item();
      if (lowest(t, true) == rank) {
        n[1] = GradNorm(*model);
        n[2] = ddp->reducer().last_divide_factor();
      }
      optimizer->Step();
      std::vector<CollectiveRecord> list = tap.Take();
      if (lowest(t, true) == rank) record(t, 0, list);
    }
  };

  JoinReport result;
  result.set_rank(rank);
  result.set_model(config.model);
  result.set_world_size(world);
  result.set_backend(std::string(group.backend_name()));
  for (int n : inputs) result.add_inputs(n);
  result.set_batch_size(config.batch_size);
  result.set_data(data.description);
  result.set_optimizer(config.optimizer);
  result.set_join(config.use_join);
  result.set_divide_by_initial_world_size(config.divide_by_initial_world_size);
  result.set_throw_on_early_termination(config.throw_on_early_termination);
  result.set_stopped_at_iteration(-1);
  if (!config.use_join) {
    train_loop();
    // A rank that ran out leaves, as a process whose loop ended would: anything more it
    // issued would only be paired with another rank's gradient allreduce. The ranks still
    // training fail in their next collective with the comm layer's diagnosis.
    if (fewest != most) {
      result.set_left_without_join(true);
      return result;
    }
  } else {
    std::vector<join::Joinable*> joinables = {ddp.get()};
    if (zero != nullptr) joinables.push_back(zero);
    joinables.push_back(&shadow_recorder);
    try {
      join::Join::Run(joinables, {.throw_on_early_termination = config.throw_on_early_termination},
                      train_loop);
    } catch (const Error& e) {
      if (!config.throw_on_early_termination || e.code() != absl::StatusCode::kAborted) throw;
      // Throw mode: every rank stops in the same iteration, the one the first rank ran out at.
      result.set_stopped_at_iteration(fewest);
      result.set_stop_message(e.what());
      std::vector<CollectiveRecord> list = tap.Take();
      if (fewest < most && lowest(fewest, true) == rank) record(fewest, 0, list);
      if (fewest < most && lowest(fewest, false) == rank) record(fewest, 1, list);
    }
  }

  // Every rank is here now: combine the per-iteration records and compare the models.
  CheckOk(group.Allreduce(numbers)->Wait(), "combining the iteration records", rank);
  CheckOk(group.Allreduce(collectives)->Wait(), "combining the collective records", rank);
  const int64_t hash = ModelHash(*model);
  Tensor hashes = Tensor::FromVector<int64_t>({hash, -hash}, {2});
  CheckOk(group.Allreduce(hashes, comm::ReduceOp::kMax)->Wait(), "comparing the final models",
          rank);
  result.set_models_identical(hashes.data<int64_t>()[0] == -hashes.data<int64_t>()[1]);
  Tensor stepped = Tensor::Zeros({world}, DType::kInt64);
  stepped.data<int64_t>()[rank] = zero != nullptr ? zero->shard_elements() : [&] {
    int64_t n = 0;
    for (const Tensor& p : model->Parameters()) n += p.numel();
    return n;
  }();
  CheckOk(group.Allreduce(stepped)->Wait(), "sharing the optimizer shard sizes", rank);
  for (int r = 0; r < world; ++r)
    result.add_elements_stepped(static_cast<int32_t>(stepped.data<int64_t>()[r]));
  result.set_authoritative_rank(ddp->authoritative_rank());

  const int stopped = result.stopped_at_iteration();
  const int recorded = stopped >= 0 ? std::min(most, fewest + 1) : most;
  for (int i = 0; i < recorded; ++i) {
    JoinIteration& it = *result.add_iterations();
    it.set_iteration(i);
    for (int r = 0; r < world; ++r) {
      if (inputs[r] > i) {
        it.add_active_ranks(r);
      } else {
        it.add_shadowing_ranks(r);
      }
    }
    it.set_completed(i != stopped);
    const double* n = numbers.data<double>() + i * 3;
    it.set_loss(n[0] / static_cast<double>(it.active_ranks_size()));
    it.set_grad_norm(n[1]);
    it.set_divide_factor(n[2]);
    it.set_active_reporter(lowest(i, true));
    it.set_shadow_reporter(lowest(i, false));
    Decode(collectives.data<int64_t>() + (i * 2 + 0) * kRoleWords, it.mutable_active_collectives());
    Decode(collectives.data<int64_t>() + (i * 2 + 1) * kRoleWords,
           it.mutable_shadowing_collectives());
  }
  {
    NoGradGuard no_grad;
    Tensor logits = model->Forward(data.x);
    int64_t correct = 0;
    for (int64_t r = 0; r < data.rows(); ++r) {
      const float* row = logits.data<float>() + r * classes;
      correct += (std::max_element(row, row + classes) - row) == data.y.data<int64_t>()[r];
    }
    result.set_final_accuracy(static_cast<double>(correct) /
                              static_cast<double>(std::max<int64_t>(1, data.rows())));
  }
  if (rank == 0 && !config.save_weights_path.empty()) {
    DDPKIT_RETURN_IF_ERROR(SaveStateDict(*model, config.save_weights_path));
  }
  return result;
}

}  // namespace

absl::StatusOr<JoinReport> RunJoin(const JoinRunConfig& config) {
  absl::StatusOr<std::vector<int64_t>> widths = nn::ParseMlpSpec(config.model);
  if (!widths.ok()) return widths.status();
  DDPKIT_RETURN_IF_ERROR(Validate(config));
  comm::ProcessGroupOptions options = config.comm_options;
  options.flight_recorder_size = std::max<size_t>(options.flight_recorder_size, 4 * kMaxRecorded);
  const cli::CommSetup setup{.backend = config.backend,
                             .world_size = config.world_size > 0
                                               ? config.world_size
                                               : static_cast<int>(config.inputs.size()),
                             .options = options};
  std::mutex mu;
  JoinReport lead;
  absl::Status status = cli::RunOnWorld(setup, [&](comm::ProcessGroup& group) -> absl::Status {
    absl::StatusOr<JoinReport> result;
    try {
      result = RunOnRank(config, *widths, group);
    } catch (const Error& e) {
      return e.ToStatus();
    }
    if (!result.ok()) return result.status();
    if (group.rank() == 0 || config.backend != "threads") {
      std::lock_guard<std::mutex> lock(mu);
      lead = *std::move(result);
    }
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return lead;
}

}  // namespace ddpkit::tools
