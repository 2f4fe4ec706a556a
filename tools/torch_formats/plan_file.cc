#include "tools/torch_formats/plan_file.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "autograd/base/error.h"
#include "nlohmann/json.hpp"
#include "tools/torch_formats/json_field.h"

namespace ddpkit::torch_formats {
namespace {

using Json = nlohmann::json;

// PyTorch's dtypes a plan file may name, and their element sizes.
constexpr std::pair<std::string_view, int64_t> kDTypeSizes[] = {
    {"float32", 4},   {"float64", 8},     {"float16", 2}, {"bfloat16", 2},
    {"complex64", 8}, {"complex128", 16}, {"int64", 8},   {"int32", 4},
    {"int16", 2},     {"int8", 1},        {"uint8", 1},   {"bool", 1}};

// Every field read names itself in errors ("parameters[3].shape[1]: expected ...").
using Field = JsonField;

constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();

absl::StatusOr<int64_t> ElementSizeOf(const Field& field) {
  DDPKIT_ASSIGN_OR_RETURN(const std::string name, field.String());
  for (const auto& [dtype, size] : kDTypeSizes) {
    if (name == dtype) return size;
  }
  return field.Expected("a PyTorch dtype (float32, float64, float16, bfloat16, int64, bool, ...)");
}

// One entry of "parameters" (with requires_grad) or "buffers" (without).
absl::StatusOr<PlanTensor> ReadTensor(const Field& field, bool is_parameter) {
  PlanTensor t;
  DDPKIT_ASSIGN_OR_RETURN(const Field name, field.Member("name"));
  DDPKIT_ASSIGN_OR_RETURN(t.name, name.String());
  DDPKIT_ASSIGN_OR_RETURN(const Field shape, field.Member("shape"));
  DDPKIT_ASSIGN_OR_RETURN(t.shape, shape.Ints(0, kMaxInt));
  DDPKIT_ASSIGN_OR_RETURN(const Field dtype, field.Member("dtype"));
  DDPKIT_ASSIGN_OR_RETURN(t.dtype, dtype.String());
  DDPKIT_ASSIGN_OR_RETURN(const int64_t element_size, ElementSizeOf(dtype));
  if (is_parameter) {
    DDPKIT_ASSIGN_OR_RETURN(const Field requires_grad, field.Member("requires_grad"));
    DDPKIT_ASSIGN_OR_RETURN(t.requires_grad, requires_grad.Bool());
    if (field.Has("backward_flops")) {
      DDPKIT_ASSIGN_OR_RETURN(const Field flops, field.Member("backward_flops"));
      DDPKIT_ASSIGN_OR_RETURN(const double value, flops.Number());
      if (!(value >= 0) || value > 1e30) return flops.Expected("a number of FLOPs >= 0");
      t.backward_flops = value;
    }
  }
  t.numel = 1;
  for (int64_t extent : t.shape) {
    if (__builtin_mul_overflow(t.numel, extent, &t.numel)) {
      return shape.Expected("a shape whose element count fits in 64 bits");
    }
  }
  if (__builtin_mul_overflow(t.numel, element_size, &t.nbytes)) {
    return shape.Expected("a shape whose size in bytes fits in 64 bits");
  }
  return t;
}

absl::StatusOr<std::vector<PlanTensor>> ReadTensors(const Field& root, std::string_view key,
                                                    bool is_parameter) {
  DDPKIT_ASSIGN_OR_RETURN(const Field list, root.Member(key));
  DDPKIT_ASSIGN_OR_RETURN(const std::vector<Field> items, list.List());
  std::vector<PlanTensor> tensors;
  for (const Field& item : items) {
    DDPKIT_ASSIGN_OR_RETURN(PlanTensor t, ReadTensor(item, is_parameter));
    tensors.push_back(std::move(t));
  }
  return tensors;
}

absl::StatusOr<std::vector<PlanAlias>> ReadAliases(const Field& root) {
  std::vector<PlanAlias> aliases;
  if (!root.Has("aliases")) return aliases;
  DDPKIT_ASSIGN_OR_RETURN(const Field list, root.Member("aliases"));
  DDPKIT_ASSIGN_OR_RETURN(const std::vector<Field> items, list.List());
  for (const Field& item : items) {
    PlanAlias alias;
    DDPKIT_ASSIGN_OR_RETURN(const Field name, item.Member("name"));
    DDPKIT_ASSIGN_OR_RETURN(alias.name, name.String());
    DDPKIT_ASSIGN_OR_RETURN(const Field same_as, item.Member("same_as"));
    DDPKIT_ASSIGN_OR_RETURN(alias.same_as, same_as.String());
    aliases.push_back(std::move(alias));
  }
  return aliases;
}

// The "ddp" section's scalars: options and caps.
absl::Status ReadDdpOptions(const Field& ddp, PyTorchDdpLog& log) {
  DDPKIT_ASSIGN_OR_RETURN(const Field world_size, ddp.Member("world_size"));
  DDPKIT_ASSIGN_OR_RETURN(log.world_size, world_size.Int(1));
  DDPKIT_ASSIGN_OR_RETURN(const Field backend, ddp.Member("backend"));
  DDPKIT_ASSIGN_OR_RETURN(log.backend, backend.String());
  DDPKIT_ASSIGN_OR_RETURN(const Field iterations, ddp.Member("iterations"));
  DDPKIT_ASSIGN_OR_RETURN(log.iterations, iterations.Int(0));
  DDPKIT_ASSIGN_OR_RETURN(const Field find_unused, ddp.Member("find_unused_parameters"));
  DDPKIT_ASSIGN_OR_RETURN(log.find_unused_parameters, find_unused.Bool());
  DDPKIT_ASSIGN_OR_RETURN(const Field static_graph, ddp.Member("static_graph"));
  DDPKIT_ASSIGN_OR_RETURN(log.static_graph, static_graph.Bool());
  DDPKIT_ASSIGN_OR_RETURN(const Field cap_mb, ddp.Member("bucket_cap_mb"));
  if (!cap_mb.IsNull()) {
    DDPKIT_ASSIGN_OR_RETURN(log.bucket_cap_mb, cap_mb.Number());
  }
  if (ddp.Has("bucket_cap_mb_list")) {
    DDPKIT_ASSIGN_OR_RETURN(const Field list, ddp.Member("bucket_cap_mb_list"));
    DDPKIT_ASSIGN_OR_RETURN(const std::vector<Field> items, list.List());
    for (const Field& item : items) {
      DDPKIT_ASSIGN_OR_RETURN(const double mb, item.Number());
      log.bucket_cap_mb_list.push_back(mb);
    }
  }
  DDPKIT_ASSIGN_OR_RETURN(const Field cap, ddp.Member("bucket_cap_bytes"));
  DDPKIT_ASSIGN_OR_RETURN(log.bucket_cap_bytes, cap.Int(1));
  DDPKIT_ASSIGN_OR_RETURN(const Field first, ddp.Member("first_bucket_bytes"));
  DDPKIT_ASSIGN_OR_RETURN(log.first_bucket_bytes, first.Int(1));
  DDPKIT_ASSIGN_OR_RETURN(const Field rebuilt, ddp.Member("has_rebuilt_buckets"));
  DDPKIT_ASSIGN_OR_RETURN(log.has_rebuilt_buckets, rebuilt.Bool());
  return absl::OkStatus();
}

// The "ddp" section's lists; indices lie in [0, num_ddp_parameters).
absl::Status ReadDdpPlans(const Field& ddp, int64_t num_ddp_parameters, PyTorchDdpLog& log) {
  const int64_t last = num_ddp_parameters - 1;
  DDPKIT_ASSIGN_OR_RETURN(const Field sizes, ddp.Member("bucket_sizes"));
  DDPKIT_ASSIGN_OR_RETURN(log.bucket_sizes, sizes.Ints(0, kMaxInt));
  if (ddp.Has("initial_per_bucket_param_indices")) {
    DDPKIT_ASSIGN_OR_RETURN(const Field initial, ddp.Member("initial_per_bucket_param_indices"));
    DDPKIT_ASSIGN_OR_RETURN(log.initial_per_bucket_param_indices, initial.IntLists(0, last));
  }
  DDPKIT_ASSIGN_OR_RETURN(const Field order, ddp.Member("prev_iteration_grad_ready_order_indices"));
  DDPKIT_ASSIGN_OR_RETURN(log.prev_iteration_grad_ready_order_indices, order.Ints(0, last));
  DDPKIT_ASSIGN_OR_RETURN(const Field rebuilt_sizes, ddp.Member("rebuilt_bucket_sizes"));
  DDPKIT_ASSIGN_OR_RETURN(log.rebuilt_bucket_sizes, rebuilt_sizes.Ints(0, kMaxInt));
  DDPKIT_ASSIGN_OR_RETURN(const Field rebuilt, ddp.Member("rebuilt_per_bucket_param_indices"));
  DDPKIT_ASSIGN_OR_RETURN(log.rebuilt_per_bucket_param_indices, rebuilt.IntLists(0, last));
  if (log.rebuilt_per_bucket_param_indices.size() != log.rebuilt_bucket_sizes.size()) {
    return rebuilt.Expected(StrCat("one list of indices per entry of rebuilt_bucket_sizes (",
                                   log.rebuilt_bucket_sizes.size(), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<PlanFile> ReadRoot(const Field& root) {
  PlanFile file;
  DDPKIT_ASSIGN_OR_RETURN(const Field format, root.Member("format"));
  DDPKIT_ASSIGN_OR_RETURN(file.format, format.String());
  if (file.format != kPlanFileFormat) return format.Expected(StrCat("\"", kPlanFileFormat, "\""));
  DDPKIT_ASSIGN_OR_RETURN(const Field model, root.Member("model"));
  DDPKIT_ASSIGN_OR_RETURN(file.model, model.String());
  if (root.Has("torch_version")) {
    DDPKIT_ASSIGN_OR_RETURN(const Field version, root.Member("torch_version"));
    DDPKIT_ASSIGN_OR_RETURN(file.torch_version, version.String());
    absl::StatusOr<reducer::PyTorchVersion> rules =
        reducer::NearestKnownPyTorch(file.torch_version, &file.rules_note);
    if (!rules.ok()) return version.Expected("a PyTorch version, as torch.__version__ prints it");
    file.rules_version = *rules;
  }
  DDPKIT_ASSIGN_OR_RETURN(file.parameters, ReadTensors(root, "parameters", true));
  if (file.parameters.empty()) {
    return absl::InvalidArgumentError("parameters: expected at least one parameter, got []");
  }
  if (root.Has("buffers")) {
    DDPKIT_ASSIGN_OR_RETURN(file.buffers, ReadTensors(root, "buffers", false));
  }
  DDPKIT_ASSIGN_OR_RETURN(file.aliases, ReadAliases(root));
  if (!root.Has("ddp")) return file;
  DDPKIT_ASSIGN_OR_RETURN(const Field ddp, root.Member("ddp"));
  if (root.Has("input_shape")) {
    DDPKIT_ASSIGN_OR_RETURN(const Field shape, root.Member("input_shape"));
    DDPKIT_ASSIGN_OR_RETURN(file.input_shape, shape.Ints(1, kMaxInt));
  }
  PyTorchDdpLog log;
  DDPKIT_RETURN_IF_ERROR(ReadDdpOptions(ddp, log));
  DDPKIT_RETURN_IF_ERROR(ReadDdpPlans(ddp, static_cast<int64_t>(file.DdpParameters().size()), log));
  file.ddp = std::move(log);
  return file;
}

// The optional "compiled" section (compiled_record.h), naming the file's parameters.
absl::StatusOr<PlanFile> WithCompiledSection(const Json& section, PlanFile file) {
  std::vector<std::string> names;
  for (const PlanTensor& p : file.parameters) names.push_back(p.name);
  DDPKIT_ASSIGN_OR_RETURN(file.compiled, ReadCompiledRecord(section, names));
  return file;
}

}  // namespace

std::vector<size_t> PlanFile::DdpParameters() const {
  std::vector<size_t> positions;
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (parameters[i].requires_grad) positions.push_back(i);
  }
  return positions;
}

bool PlanFile::HasFlops() const {
  return std::all_of(parameters.begin(), parameters.end(), [](const PlanTensor& p) {
    return !p.requires_grad || p.backward_flops.has_value();
  });
}

absl::StatusOr<PlanFile> ParsePlanFile(std::string_view text, std::string_view source) {
  Json root;
  try {
    root = Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {  // parse_error, and out_of_range for 1e999
    return absl::InvalidArgumentError(StrCat(source, ": not valid JSON (", e.what(), ")"));
  }
  absl::StatusOr<PlanFile> file = ReadRoot(Field(root, ""));
  if (file.ok() && root.contains("compiled"))
    file = WithCompiledSection(root.at("compiled"), *file);
  if (!file.ok()) {
    return absl::InvalidArgumentError(StrCat(source, ": ", file.status().message()));
  }
  return file;
}

absl::StatusOr<PlanFile> ReadPlanFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(StrCat(path, ": cannot open the plan file"));
  std::ostringstream text;
  text << in.rdbuf();
  return ParsePlanFile(text.str(), path);
}

}  // namespace ddpkit::torch_formats
