// `ddpkit buckets`: the bucket assignment for given tensor sizes (PyTorch's
// compute_bucket_assignment_by_size), or the plans DDP uses for a model — before and after
// the rebuild, the latter measured by running two real iterations — or for a PyTorch model's
// plan file (--params), checked against the plans PyTorch logged in it.
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tools/cli/buckets_compiled.h"
#include "tools/cli/commands.h"
#include "tools/cli/ddp_flags.h"
#include "tools/cli/job_flags.h"
#include "tools/cli/print_json.h"
#include "tools/jobs/bucket_plans.h"

ABSL_FLAG(std::string, sizes, "", "element counts, one per parameter: N1,N2,...");
ABSL_FLAG(std::string, dtypes, "f32",
          "dtype per parameter (f32,f64,f16,bf16,...), or one dtype for all");
ABSL_FLAG(std::string, limits, "1048576,26214400", "bucket byte limits; the last one repeats");
ABSL_FLAG(std::string, order, "",
          "gradient arrival order (a permutation of parameter indices): the rebuild's walk, "
          "result not sorted");
ABSL_FLAG(std::string, sparse, "", "indices of parameters with sparse gradients");
ABSL_FLAG(
    std::string, params, "",
    "a plan file (tools/scripts/export_ddp_plan.py): buckets shows DDP's plans for that PyTorch "
    "model, simulate predicts its step; buckets' caps default to the ones PyTorch ran with");

namespace ddpkit::cli {
namespace {

using reducer::BucketInfo;
using reducer::BucketTensorSpec;
using Infos = google::protobuf::RepeatedPtrField<BucketInfo>;

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

// The parameters joined by ", ", wrapped at about 100 columns under the table's last column.
std::string Wrapped(const std::vector<std::string>& params) {
  constexpr size_t kIndent = 45, kWidth = 100;
  std::string out, line;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string item = params[i] + (i + 1 < params.size() ? "," : "");
    if (!line.empty() && kIndent + line.size() + 1 + item.size() > kWidth) {
      out += line + "\n" + std::string(kIndent, ' ');
      line.clear();
    }
    line += (line.empty() ? "" : " ") + item;
  }
  return out + line;
}

// One row per bucket: dtype, bytes, limit, and its parameters (index and, when known, name).
std::string TableOf(const Infos& buckets) {
  std::string out = absl::StrFormat("%6s  %-9s  %10s  %10s  %s\n", "bucket", "dtype", "bytes",
                                    "limit", "parameters");
  for (int b = 0; b < buckets.size(); ++b) {
    const BucketInfo& info = buckets[b];
    std::vector<std::string> params;
    for (int i = 0; i < info.param_indices_size(); ++i) {
      params.push_back(info.param_names().empty()
                           ? StrCat(info.param_indices(i))
                           : StrCat(info.param_indices(i), " ", info.param_names(i)));
    }
    const auto limit = static_cast<size_t>(info.limit_bytes());
    const std::string limit_text = limit == reducer::kNoBucketSizeLimit ? "none"
                                   : limit == 0                         ? "0 (sparse)"
                                                                        : StrCat(limit);
    out += absl::StrFormat("%6d  %-9s  %10d  %10s  %s\n", b, info.dtype(), info.bytes(), limit_text,
                           Wrapped(params));
  }
  return out;
}

int ParameterCount(const Infos& buckets) {
  int n = 0;
  for (const BucketInfo& info : buckets) n += info.param_indices_size();
  return n;
}

// The rebuild's limits as the report's header shows them.
std::string RebuildLimits(const jobs::ModelBuckets& plans) {
  if (!plans.per_bucket_cap_bytes().empty()) {
    return StrCat("per-bucket caps [", absl::StrJoin(plans.per_bucket_cap_bytes(), ", "),
                  "] (bucket_cap_mb_list; the last repeats)");
  }
  return StrCat("limits [", plans.first_bucket_bytes(), ", ", plans.bucket_cap_bytes(), "]");
}

void PrintModelPlans(const jobs::ModelBuckets& plans) {
  std::cout << "DDP's buckets for " << plans.model() << " ("
            << ParameterCount(plans.initial_buckets()) << " parameters, "
            << plans.total_parameter_bytes() << " bytes), in reduction order, as "
            << plans.pytorch_rules() << " plans them"
            << (plans.pytorch_rules_note().empty() ? ""
                                                   : StrCat(" (", plans.pytorch_rules_note(), ")"))
            << ".\n\n"
            << "Initial plan — "
            << (!plans.per_bucket_cap_bytes().empty() ? "the per-bucket caps, reversed"
                : plans.size_limited_initial_plan()
                    ? "limits [first bucket, cap], reversed"
                    : "one bucket per dtype (no size limit until the rebuild)")
            << ":\n"
            << TableOf(plans.initial_buckets()) << "\n";
  if (plans.rebuilt_buckets().empty()) {
    std::cout << "No rebuild: find_unused_parameters without static_graph keeps the initial "
                 "plan.\n";
    return;
  }
  const std::string order =
      plans.grad_ready_order_size() <= 24
          ? absl::StrJoin(plans.grad_ready_order(), ", ")
          : StrCat("the file's, ", plans.grad_ready_order_size(), " parameters; --json lists it");
  std::cout << (plans.grad_ready_order_estimated()
                    ? "Rebuilt after the first synced iteration — an ESTIMATE: the file records no "
                      "gradient-ready order, so reverse registration order stands in for it"
                    : StrCat(
                          "Rebuilt after the first synced iteration, in gradient-arrival order (",
                          order, ")"))
            << ", " << RebuildLimits(plans) << ":\n"
            << TableOf(plans.rebuilt_buckets());
}

// What the small first bucket does: where it closes, and the plan without it.
void PrintFirstBucketEffect(const jobs::ModelBuckets& plans) {
  if (plans.rebuilt_buckets().empty() || !plans.per_bucket_cap_bytes().empty()) return;
  if (plans.first_bucket_bytes() == plans.bucket_cap_bytes()) {
    std::cout << "\nFirst bucket: capped like every other, at " << plans.bucket_cap_bytes()
              << " bytes. Since PyTorch 2.4 a bucket_cap_mb that is passed — even 25 — caps the "
                 "first bucket too; leave it unset for a 1 MiB first bucket, whose allreduce "
                 "starts earlier in backward.\n";
    return;
  }
  const BucketInfo& first = plans.rebuilt_buckets(0);
  std::cout << "\nFirst bucket: capped at " << plans.first_bucket_bytes()
            << " bytes so that its allreduce starts early in backward; a bucket closes at the "
               "first tensor that takes it to its cap, so it holds "
            << first.param_indices_size() << " tensors, " << first.bytes() << " bytes"
            << (first.bytes() > plans.first_bucket_bytes() ? " (more than the cap)" : "") << ".\n";
  if (plans.rebuilt_buckets_without_first_bucket_cap().empty()) return;  // --model: not planned
  const BucketInfo& uncapped = plans.rebuilt_buckets_without_first_bucket_cap(0);
  std::cout << "With the cap for every bucket it would hold " << uncapped.param_indices_size()
            << " tensors, " << uncapped.bytes() << " bytes, and the plan would have "
            << (plans.rebuilt_buckets_without_first_bucket_cap_size() ==
                        plans.rebuilt_buckets_size()
                    ? "as many buckets"
                    : StrCat(plans.rebuilt_buckets_without_first_bucket_cap_size(),
                             " buckets instead of ", plans.rebuilt_buckets_size()))
            << ".\n";
}

// --params' story after the plans: skipped parameters, and the verdict against PyTorch.
void PrintPlanFileNotes(const jobs::ModelBuckets& plans) {
  PrintFirstBucketEffect(plans);
  if (!plans.skipped_parameters().empty()) {
    std::cout << "\nNot reduced (requires_grad false, so not in DDP's buckets; indices above "
                 "skip them): "
              << absl::StrJoin(plans.skipped_parameters(), ", ") << "\n";
  }
  const jobs::PyTorchAgreement& pytorch = plans.pytorch();
  std::cout << "\nAgrees with PyTorch: "
            << (!pytorch.compared() ? StrCat("not compared — ", pytorch.not_compared())
                : pytorch.agrees()  ? "yes (initial and rebuilt plans, bucket by bucket)"
                                   : StrCat("NO — first difference: ", pytorch.first_difference()))
            << "\n";
}

// The PyTorch, caps and mode the file was recorded with, unless the flags say otherwise, so the
// plans compare.
absl::StatusOr<reducer::DdpOptions> OptionsForPlanFile(const torch_formats::PlanFile& file) {
  DDPKIT_ASSIGN_OR_RETURN(const reducer::DdpOptions flags, DdpOptionsFromFlags(file.rules_version));
  if (!file.ddp) return flags;
  reducer::DdpOptions options = jobs::RecordedDdpOptions(file);
  options.pytorch_version = flags.pytorch_version;
  if (FlagDiffersFromDefault("bucket_cap_mb") || FlagDiffersFromDefault("first_bucket_mb") ||
      FlagDiffersFromDefault("bucket_cap_mb_list")) {
    options.bucket_cap_mb = flags.bucket_cap_mb;
    options.first_bucket_mb = flags.first_bucket_mb;
    options.bucket_cap_mb_list = flags.bucket_cap_mb_list;
  }
  if (FlagDiffersFromDefault("find_unused_parameters")) {
    options.find_unused_parameters = flags.find_unused_parameters;
  }
  if (FlagDiffersFromDefault("static_graph")) options.static_graph = flags.static_graph;
  DDPKIT_RETURN_IF_ERROR(reducer::ValidateDdpOptions(options));
  return options;
}

// --params FILE: the plans from the file's parameters and recorded order.
int RunParams(bool json) {
  absl::StatusOr<torch_formats::PlanFile> file =
      torch_formats::ReadPlanFile(absl::GetFlag(FLAGS_params));
  if (!file.ok()) return Fail("buckets", file.status());
  absl::StatusOr<reducer::DdpOptions> options = OptionsForPlanFile(*file);
  if (!options.ok()) return Fail("buckets", options.status());
  absl::StatusOr<jobs::ModelBuckets> plans = jobs::PlanFileBucketPlans(*file, *options);
  if (!plans.ok()) return Fail("buckets", plans.status());
  if (file->rules_version) {
    plans->set_pytorch_rules_note(
        *file->rules_version == options->pytorch_version
            ? StrCat("the file's torch_version ", file->torch_version,
                     file->rules_note.empty() ? "" : StrCat("; ", file->rules_note))
            : StrCat("--pytorch-version; the file was recorded with PyTorch ",
                     file->torch_version));
  }
  if (absl::Status compiled = AddCompiledSplit(*file, *plans); !compiled.ok()) {
    return Fail("buckets", compiled);
  }
  if (json) {
    PrintJson(*plans);
    return kExitOk;
  }
  PrintModelPlans(*plans);
  PrintPlanFileNotes(*plans);
  PrintCompiledSplit(*plans);
  return kExitOk;
}

// The model's plans (train's default model when --model is not given).
int RunModel(bool json) {
  absl::StatusOr<reducer::DdpOptions> options = DdpOptionsFromFlags();
  if (!options.ok()) return Fail("buckets", options.status());
  absl::StatusOr<jobs::ModelBuckets> plans =
      jobs::ModelBucketPlans(absl::GetFlag(FLAGS_model), *options);
  if (!plans.ok()) return Fail("buckets", plans.status());
  if (json) {
    PrintJson(*plans);
  } else {
    PrintModelPlans(*plans);
    PrintFirstBucketEffect(*plans);
  }
  return kExitOk;
}

// --sizes and --dtypes as the assignment's tensor descriptions.
absl::StatusOr<std::vector<BucketTensorSpec>> SpecsFromFlags() {
  DDPKIT_ASSIGN_OR_RETURN(const std::vector<int64_t> sizes,
                          ParseList<int64_t>("sizes", absl::GetFlag(FLAGS_sizes)));
  std::vector<std::string> dtype_names = absl::StrSplit(absl::GetFlag(FLAGS_dtypes), ',');
  if (dtype_names.size() != 1 && dtype_names.size() != sizes.size()) {
    return absl::InvalidArgumentError(StrCat("--dtypes has ", dtype_names.size(), " entries for ",
                                             sizes.size(),
                                             " sizes; give one per size or one for all"));
  }
  std::vector<BucketTensorSpec> specs;
  for (size_t i = 0; i < sizes.size(); ++i) {
    absl::StatusOr<DType> dtype = ParseDType(dtype_names[dtype_names.size() == 1 ? 0 : i]);
    if (!dtype.ok()) {
      return absl::InvalidArgumentError(StrCat("--dtypes: ", dtype.status().message()));
    }
    specs.push_back({sizes[i], *dtype});
  }
  return specs;
}

// --sparse as one flag per parameter (empty when not given).
absl::StatusOr<std::vector<bool>> SparseFromFlags(size_t num_params) {
  DDPKIT_ASSIGN_OR_RETURN(const std::vector<size_t> indices,
                          ParseList<size_t>("sparse", absl::GetFlag(FLAGS_sparse)));
  std::vector<bool> sparse;
  if (indices.empty()) return sparse;
  sparse.assign(num_params, false);
  for (size_t index : indices) {
    if (index >= num_params) {
      return absl::InvalidArgumentError(
          StrCat("--sparse names parameter ", index, ", but there are ", num_params));
    }
    sparse[index] = true;
  }
  return sparse;
}

absl::StatusOr<reducer::BucketAssignment> AssignmentFromFlags(
    const std::vector<BucketTensorSpec>& specs) {
  DDPKIT_ASSIGN_OR_RETURN(const std::vector<size_t> limits,
                          ParseList<size_t>("limits", absl::GetFlag(FLAGS_limits)));
  DDPKIT_ASSIGN_OR_RETURN(const std::vector<size_t> order,
                          ParseList<size_t>("order", absl::GetFlag(FLAGS_order)));
  DDPKIT_ASSIGN_OR_RETURN(const std::vector<bool> sparse, SparseFromFlags(specs.size()));
  absl::StatusOr<reducer::BucketAssignment> assignment =
      reducer::ComputeBucketAssignmentBySize(specs, limits, sparse, order);
  if (!assignment.ok()) return absl::InvalidArgumentError(assignment.status().message());
  return assignment;
}

int RunBuckets(const std::vector<std::string>&) {
  const bool json = absl::GetFlag(FLAGS_json);
  if (!absl::GetFlag(FLAGS_params).empty()) {
    if (!absl::GetFlag(FLAGS_sizes).empty() || FlagDiffersFromDefault("model")) {
      return Fail("buckets", absl::InvalidArgumentError(
                                 "--params, --sizes and --model are alternatives; give one"));
    }
    return RunParams(json);
  }
  if (absl::GetFlag(FLAGS_sizes).empty()) return RunModel(json);
  absl::StatusOr<std::vector<BucketTensorSpec>> specs = SpecsFromFlags();
  if (!specs.ok()) return Fail("buckets", specs.status());
  absl::StatusOr<reducer::BucketAssignment> assignment = AssignmentFromFlags(*specs);
  if (!assignment.ok()) return Fail("buckets", assignment.status());
  if (json) {
    PrintJson(jobs::PlanOf(*assignment));
  } else {
    std::cout << TableOf(jobs::DescribeBuckets(*assignment, *specs));
  }
  return kExitOk;
}

}  // namespace

Subcommand BucketsSubcommand() {
  std::vector<std::string> flags = {"sizes",  "dtypes", "limits", "order",
                                    "sparse", "model",  "params", "json"};
  flags.insert(flags.end(), kDdpFlagNames.begin(), kDdpFlagNames.end());
  return {.name = "buckets",
          .summary = "show how DDP assigns parameters to gradient buckets",
          .usage =
              "ddpkit buckets --sizes N1,N2,... [--dtypes ...] [--limits ...] [--order ...] "
              "[--sparse ...] [--json]\n       ddpkit buckets --model mlp:IN,...,OUT [DDP flags]"
              "\n       ddpkit buckets --params FILE [--pytorch-version V] [--bucket-cap-mb X] "
              "[--first-bucket-mb Y] [--json]",
          .flag_names = flags,
          .run = RunBuckets};
}

}  // namespace ddpkit::cli
