// `ddpkit buckets`: the bucket assignment for given tensor sizes (PyTorch's
// compute_bucket_assignment_by_size), or the plans DDP uses for a model — before and after
// the rebuild, the latter measured by running two real iterations.
#include <iostream>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "autograd/ops.h"
#include "autograd/random.h"
#include "comm/threads/threads_world.h"
#include "nlohmann/json.hpp"
#include "reducer/distributed_data_parallel.h"
#include "tools/cli/commands.h"
#include "tools/ddp_flags.h"

ABSL_DECLARE_FLAG(bool, json);          // defined with `train`
ABSL_DECLARE_FLAG(std::string, model);  // likewise

ABSL_FLAG(std::string, sizes, "", "element counts, one per parameter: N1,N2,...");
ABSL_FLAG(std::string, dtypes, "f32",
          "dtype per parameter (f32,f64,f16,bf16,...), or one dtype for all");
ABSL_FLAG(std::string, limits, "1048576,26214400", "bucket byte limits; the last one repeats");
ABSL_FLAG(std::string, order, "",
          "gradient arrival order (a permutation of parameter indices): the rebuild's walk, "
          "result not sorted");
ABSL_FLAG(std::string, sparse, "", "indices of parameters with sparse gradients");

namespace ddpkit::cli {
namespace {

using reducer::BucketAssignment;
using reducer::BucketTensorSpec;

template <typename T>
absl::StatusOr<std::vector<T>> ParseList(std::string_view flag, const std::string& text) {
  std::vector<T> values;
  if (text.empty()) return values;
  for (absl::string_view part : absl::StrSplit(absl::string_view(text.data(), text.size()), ',')) {
    T value;
    if (!absl::SimpleAtoi(part, &value) || value < 0) {
      return absl::InvalidArgumentError(
          StrCat("--", flag, ": '", std::string(part), "' is not a non-negative integer"));
    }
    values.push_back(value);
  }
  return values;
}

std::string TableOf(const BucketAssignment& a, const std::vector<BucketTensorSpec>& specs,
                    const std::vector<std::string>& names) {
  std::string out = absl::StrFormat("%6s  %-9s  %10s  %10s  %s\n", "bucket", "dtype", "bytes",
                                    "limit", "parameters");
  for (size_t b = 0; b < a.buckets.size(); ++b) {
    size_t bytes = 0;
    std::string params;
    for (size_t index : a.buckets[b]) {
      bytes += specs[index].nbytes();
      StrAppend(&params, params.empty() ? "" : ", ", index);
      if (!names.empty()) StrAppend(&params, " ", names[index]);
    }
    const std::string limit = a.limits[b] == reducer::kNoBucketSizeLimit ? "none"
                              : a.limits[b] == 0                         ? "0 (sparse)"
                                                                         : StrCat(a.limits[b]);
    out += absl::StrFormat("%6d  %-9s  %10d  %10s  %s\n", b,
                           DTypeName(specs[a.buckets[b][0]].dtype), bytes, limit, params);
  }
  return out;
}

nlohmann::json JsonOf(const BucketAssignment& a) {
  return {{"buckets", a.buckets}, {"limits", a.limits}};
}

int Fail(const absl::Status& status) {
  std::cerr << "ddpkit buckets: " << status.message() << "\n";
  return status.code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
}

// The model's plans: the initial one from DDP's rules, the rebuilt one from two real
// iterations on a world of one (gradient arrival order is a property of the backward pass).
int RunModel(const std::string& spec, bool json) {
  absl::StatusOr<std::vector<int64_t>> widths = nn::ParseMlpSpec(spec);
  if (!widths.ok()) return Fail(widths.status());
  absl::StatusOr<reducer::DdpOptions> options = DdpOptionsFromFlags();
  if (!options.ok()) return Fail(options.status());
  reducer::DdpLoggingData log;
  absl::Status status = comm::RunThreadsWorld(1, [&](comm::ProcessGroup& group) -> absl::Status {
    auto model = nn::MakeMlp(*widths, 0);
    DDPKIT_ASSIGN_OR_RETURN(auto ddp,
                            reducer::DistributedDataParallel::Create(model, group, *options));
    Tensor x = Tensor::Empty({2, widths->front()});
    Generator(0).FillNormal(x);
    Tensor y = Tensor::Zeros({2}, DType::kInt64);
    for (int i = 0; i < 2 + (options->static_graph ? 1 : 0); ++i) {
      CrossEntropy(ddp->Forward(x), y).Backward();
    }
    log = ddp->LoggingData();
    return absl::OkStatus();
  });
  if (!status.ok()) return Fail(status);

  auto plan = [](const auto& buckets) {
    BucketAssignment a;
    for (const reducer::BucketInfo& b : buckets) {
      a.buckets.emplace_back(b.param_indices().begin(), b.param_indices().end());
      a.limits.push_back(static_cast<size_t>(b.limit_bytes()));
    }
    return a;
  };
  const BucketAssignment initial = plan(log.initial_buckets());
  const BucketAssignment rebuilt = plan(log.rebuilt_buckets());
  if (json) {
    nlohmann::json out = {{"initial", JsonOf(initial)},
                          {"rebuilt", JsonOf(rebuilt)},
                          {"grad_ready_order", log.prev_iteration_grad_ready_order_indices()}};
    std::cout << out.dump() << "\n";
    return kExitOk;
  }
  std::vector<BucketTensorSpec> specs;
  std::vector<std::string> names;
  auto model = nn::MakeMlp(*widths, 0);
  for (const auto& [name, p] : model->NamedParameters()) {
    specs.push_back({p.numel(), p.dtype()});
    names.push_back(name);
  }
  std::cout << "DDP's buckets for " << spec << " (" << specs.size() << " parameters, "
            << log.total_parameter_size_bytes() << " bytes), in reduction order.\n\n"
            << "Initial plan — "
            << (options->find_unused_parameters && !options->static_graph
                    ? "limits [first bucket, cap], reversed"
                    : "one bucket per dtype (no size limit until the rebuild)")
            << ":\n"
            << TableOf(initial, specs, names) << "\n";
  if (rebuilt.buckets.empty()) {
    std::cout
        << "No rebuild: find_unused_parameters without static_graph keeps the initial plan.\n";
  } else {
    std::cout << "Rebuilt after the first synced iteration, in gradient-arrival order ("
              << absl::StrJoin(log.prev_iteration_grad_ready_order_indices(), ", ") << "), limits ["
              << reducer::MegabytesToBytes(options->first_bucket_mb) << ", "
              << reducer::MegabytesToBytes(options->bucket_cap_mb) << "]:\n"
              << TableOf(rebuilt, specs, names);
  }
  return kExitOk;
}

int RunBuckets(const std::vector<std::string>&) {
  const bool json = absl::GetFlag(FLAGS_json);
  // Without --sizes: the plans for --model (train's default model when not given).
  if (absl::GetFlag(FLAGS_sizes).empty()) return RunModel(absl::GetFlag(FLAGS_model), json);
  absl::StatusOr<std::vector<int64_t>> sizes =
      ParseList<int64_t>("sizes", absl::GetFlag(FLAGS_sizes));
  if (!sizes.ok()) return Fail(sizes.status());
  absl::StatusOr<std::vector<size_t>> limits =
      ParseList<size_t>("limits", absl::GetFlag(FLAGS_limits));
  if (!limits.ok()) return Fail(limits.status());
  absl::StatusOr<std::vector<size_t>> order =
      ParseList<size_t>("order", absl::GetFlag(FLAGS_order));
  if (!order.ok()) return Fail(order.status());
  absl::StatusOr<std::vector<size_t>> sparse_indices =
      ParseList<size_t>("sparse", absl::GetFlag(FLAGS_sparse));
  if (!sparse_indices.ok()) return Fail(sparse_indices.status());

  std::vector<std::string> dtype_names = absl::StrSplit(absl::GetFlag(FLAGS_dtypes), ',');
  if (dtype_names.size() != 1 && dtype_names.size() != sizes->size()) {
    return Fail(absl::InvalidArgumentError(StrCat("--dtypes has ", dtype_names.size(),
                                                  " entries for ", sizes->size(),
                                                  " sizes; give one per size or one for all")));
  }
  std::vector<BucketTensorSpec> specs;
  for (size_t i = 0; i < sizes->size(); ++i) {
    absl::StatusOr<DType> dtype = ParseDType(dtype_names[dtype_names.size() == 1 ? 0 : i]);
    if (!dtype.ok())
      return Fail(absl::InvalidArgumentError(StrCat("--dtypes: ", dtype.status().message())));
    specs.push_back({(*sizes)[i], *dtype});
  }
  std::vector<bool> sparse;
  if (!sparse_indices->empty()) {
    sparse.assign(specs.size(), false);
    for (size_t index : *sparse_indices) {
      if (index >= specs.size()) {
        return Fail(absl::InvalidArgumentError(
            StrCat("--sparse names parameter ", index, ", but there are ", specs.size())));
      }
      sparse[index] = true;
    }
  }
  absl::StatusOr<BucketAssignment> assignment =
      reducer::ComputeBucketAssignmentBySize(specs, *limits, sparse, *order);
  if (!assignment.ok()) return Fail(absl::InvalidArgumentError(assignment.status().message()));
  if (json) {
    std::cout << JsonOf(*assignment).dump() << "\n";
  } else {
    std::cout << TableOf(*assignment, specs, {});
  }
  return kExitOk;
}

}  // namespace

Subcommand BucketsSubcommand() {
  std::vector<std::string> flags = {"sizes",  "dtypes", "limits", "order",
                                    "sparse", "model",  "json"};
  flags.insert(flags.end(), kDdpFlagNames.begin(), kDdpFlagNames.end());
  return {.name = "buckets",
          .summary = "show how DDP assigns parameters to gradient buckets",
          .usage =
              "ddpkit buckets --sizes N1,N2,... [--dtypes ...] [--limits ...] [--order ...] "
              "[--sparse ...] [--json]\n       ddpkit buckets --model mlp:IN,...,OUT [DDP flags]",
          .flag_names = flags,
          .run = RunBuckets};
}

}  // namespace ddpkit::cli
