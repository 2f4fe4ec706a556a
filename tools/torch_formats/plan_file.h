// Plan files: a PyTorch model's parameters, buffers and, when recorded, the bucket plans
// PyTorch's own DDP made for it — written by tools/scripts/export_ddp_plan.py, read here for
// `ddpkit buckets --params` and `ddpkit simulate --params`. The schema ("format":
// "ddpkit-plan/1") is documented in docs/plan_files.md.
//
// The reader trusts nothing in the file: a malformed one is an InvalidArgument naming the field
// ("parameters[3].shape[1]: expected a non-negative integer, got -2"), never a crash.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "reducer/pytorch_version.h"
#include "tools/torch_formats/compiled_record.h"

namespace ddpkit::torch_formats {

inline constexpr std::string_view kPlanFileFormat = "ddpkit-plan/1";

// A parameter or a buffer as the file lists it.
struct PlanTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;           // PyTorch's name without "torch.": "float32", "int64", "bool", ...
  bool requires_grad = false;  // always false for a buffer
  int64_t numel = 0;           // the product of `shape` (1 for a scalar)
  int64_t nbytes = 0;          // numel times the dtype's element size
  // FLOPs of one backward pass at the file's input_shape attributed to this parameter (the
  // exporter's "backward_flops"; docs/plan_files.md says how); absent in older files.
  std::optional<double> backward_flops;
};

// A parameter registered under a second name (a tied weight), listed once in `parameters`.
struct PlanAlias {
  std::string name;
  std::string same_as;
};

// What PyTorch's DDP did with the model (the file's "ddp" section): its options and what its
// _get_ddp_logging_data() showed after `iterations` iterations. Parameter indices here are
// DDP's: positions among the parameters with requires_grad (PlanFile::DdpParameters).
struct PyTorchDdpLog {
  int64_t world_size = 1;
  std::string backend;
  int64_t iterations = 0;
  bool find_unused_parameters = false;
  bool static_graph = false;
  // What the exporter passed as bucket_cap_mb; nullopt: left unset (PyTorch >= 2.4 tells the two
  // apart). bucket_cap_bytes is what DDP logged either way.
  std::optional<double> bucket_cap_mb;
  std::vector<double> bucket_cap_mb_list;  // PyTorch >= 2.11's per-bucket caps, when passed
  int64_t bucket_cap_bytes = 0;
  int64_t first_bucket_bytes = 0;
  // The initial plan, in reduction order: its bytes per bucket, and its indices (from PyTorch's
  // _compute_bucket_assignment_by_size, as DDP's constructor calls it; empty when not given).
  std::vector<int64_t> bucket_sizes;
  std::vector<std::vector<int64_t>> initial_per_bucket_param_indices;
  bool has_rebuilt_buckets = false;
  std::vector<int64_t> prev_iteration_grad_ready_order_indices;  // empty when not logged
  std::vector<int64_t> rebuilt_bucket_sizes;
  std::vector<std::vector<int64_t>> rebuilt_per_bucket_param_indices;
};

struct PlanFile {
  std::string format;         // kPlanFileFormat
  std::string model;          // as given to the exporter: "torchvision:resnet50"
  std::string torch_version;  // as torch.__version__ printed it; "" when not recorded
  // The DDP rules the file was recorded under (the nearest release ddpkit knows, and a note when
  // that is not torch_version itself); nullopt without a torch_version.
  std::optional<reducer::PyTorchVersion> rules_version;
  std::string rules_note;
  std::vector<int64_t> input_shape;    // empty: the parameters alone, no "ddp" section
  std::vector<PlanTensor> parameters;  // registration order, each tensor once
  std::vector<PlanTensor> buffers;
  std::vector<PlanAlias> aliases;
  std::optional<PyTorchDdpLog> ddp;
  std::optional<CompiledDdpRecord> compiled;  // the "compiled" section (torch.compile), if any

  // Positions in `parameters` of the ones DDP reduces (requires_grad), in order: DDP's
  // parameter i is parameters[DdpParameters()[i]].
  std::vector<size_t> DdpParameters() const;
  // Whether every parameter DDP reduces carries backward_flops.
  bool HasFlops() const;
};

// Parses a plan file's text; `source` names it in errors ("resnet50.json: ...").
absl::StatusOr<PlanFile> ParsePlanFile(std::string_view text, std::string_view source);

// Reads and parses the file at `path`: NotFound when it cannot be opened, else ParsePlanFile.
absl::StatusOr<PlanFile> ReadPlanFile(const std::string& path);

}  // namespace ddpkit::torch_formats
