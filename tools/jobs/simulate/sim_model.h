// What `ddpkit simulate` knows of a model: its parameters in registration order (name, shape,
// dtype), the order their gradients become ready in backward, and how long each gradient takes
// to compute. Plain data, so any source can fill it: an `mlp:` spec, a parameter table, a
// ddpkit trace, or (at merge time) a plan file through FromParams.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "autograd/dtype.h"
#include "reducer/bucket_assignment.h"
#include "reducer/pytorch_version.h"

namespace ddpkit::jobs::sim {

struct SimParam {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::kFloat32;
  double forward_flops = 0;  // the whole micro-batch's forward FLOPs attributed to it
  double backward_us = 0;    // backward compute between the previous gradient and this one
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * ElementSize(dtype); }
  // PowerSGD's view of it: shape[0] rows by the rest (1 row for a scalar).
  int64_t rows() const { return shape.empty() ? 1 : shape[0]; }
  int64_t cols() const { return rows() == 0 ? 0 : numel() / rows(); }
};

struct SimModel {
  std::string name;
  std::vector<SimParam> params;          // registration order (requires_grad ones only)
  std::vector<size_t> grad_ready_order;  // indices into params, first ready first
  bool order_estimated = true;           // reverse registration order, not observed
  double forward_us = 0;
  double backward_tail_us = 0;  // backward compute after the last gradient
  double optimizer_us = 0;
  // How long the rank with the longest step waited for the rank that sets the step's pace to
  // start it (--calibrate measures it, else 0): ranks that share cores take turns at finalize
  // and the optimizer, so one starts the next forward late and the others wait for it.
  // Negative when the rank with the longest step itself started after the pace-setter (the
  // cores left it behind at the end of the step too): its step begins, and is, that much later
  // and shorter than the pace-setter's timeline.
  double start_skew_us = 0;
  // Finalize's own work once the last collective is done: the gradients copied out of the
  // buckets into .grad (none with gradient_as_bucket_view). Measured by --calibrate, else 0.
  double finalize_us = 0;
  // find_unused_parameters' graph search after each forward (--calibrate from a run with it
  // measures it; forward_us is then forward without it), else 0.
  double unused_search_us = 0;
  // A replayed calibration iteration's (calibrate.h, Replay::comm_excess_us): how much longer
  // than their fitted cost its allreduces took, as the rank whose step is measured saw them
  // (negative: shorter). That rank waits for it after the last collective, once. Else 0.
  double comm_wait_us = 0;
  // Once backward is over, how long after a bucket's collectives end the next bucket's starts,
  // per byte of the one that ended (handoff.h; --calibrate measures it, else 0).
  double handoff_us_per_byte = 0;
  // The machine's speed at the work a comm hook adds (--calibrate measures both; 0: unknown, and
  // the hook's own compute is not priced): a copy, from finalize's copies out of the buckets,
  // and FLOPs, from the model's FLOPs over its measured forward and backward.
  double copy_us_per_byte = 0;
  double flops_per_us = 0;
  // A comm hook's own work, measured by --calibrate from a run with that hook (`hook_measured`
  // names it, as DDP's logging data does: "fp16", "powersgd", ...; empty when the run had none).
  // Per byte of a bucket's gradients: the part before its first collective, on backward's
  // thread (fp16's cast down), and the part after its collectives, on the communication thread
  // (the cast back; PowerSGD's products between P and Q, and its decompression).
  std::string hook_measured;
  double hook_launch_us_per_byte = 0;
  double hook_callback_us_per_byte = 0;
  std::string compute_source;  // how the times were obtained, for the report
  // Where forward_flops came from when that needs saying (a plan file's measured FLOPs, or an
  // estimate from shapes): a FLOPs-based compute profile repeats it in its source line.
  std::string flops_source;
  bool flops_unknown = false;  // a resnet:/gpt: spec: only a trace can give its times
  // A plan file's torch_version as DDP rules (plan_file.h's rules_version), with its note.
  std::optional<reducer::PyTorchVersion> recorded_rules;
  std::string recorded_rules_note;

  std::vector<reducer::BucketTensorSpec> Specs() const;
  double BackwardUs() const;  // the backward pass: every gradient plus the tail
  int64_t TotalBytes() const;
};

// The seam for a plan file (tools/torch_formats/plan_file.h): its parameters in registration
// order and, when it has one, the observed grad-ready order (else reverse registration order).
// Parameters with requires_grad false are dropped and the order renumbered. Times are zero
// until a compute profile fills them. InvalidArgument for mismatched lengths or a bad order.
absl::StatusOr<SimModel> FromParams(const std::vector<std::string>& names,
                                    const std::vector<std::vector<int64_t>>& shapes,
                                    const std::vector<DType>& dtypes,
                                    const std::vector<bool>& requires_grad,
                                    const std::vector<size_t>& grad_ready_order = {});

// A plan file (tools/scripts/export_ddp_plan.py): its parameters, DDP's logged grad-ready
// order when present, and each parameter's forward FLOPs at `batch` samples — half its
// recorded backward_flops, scaled from the file's input_shape[0] to `batch`. A file without
// FLOPs gets an estimate from shapes (2·numel·batch per tensor of two or more dimensions,
// numel·batch otherwise), which `flops_source` says. InvalidArgument for a parameter needing a
// gradient in a dtype ddpkit lacks.
absl::StatusOr<SimModel> FromPlanFile(const std::string& path, int batch);

// An `mlp:` spec at `batch` rows: FLOPs per Linear layer (forward 2·B·in·out for the weight,
// B·out for the bias) and the grad-ready order DDP observes (measured on a world of one). A
// `resnet:` or `gpt:` spec: its parameters and observed order, FLOPs unknown (flops_unknown).
absl::StatusOr<SimModel> FromMlpSpec(const std::string& spec, int batch);

// A parameter table: one line per parameter, "NAME DTYPE AxBx... FORWARD_FLOPS_PER_SAMPLE"
// ('#' starts a comment), scaled to `batch` samples. tools/scripts/sim_param_tables.py writes
// them (tests/testdata/simulate/).
absl::StatusOr<SimModel> FromParamTable(const std::string& path, int batch);

}  // namespace ddpkit::jobs::sim
