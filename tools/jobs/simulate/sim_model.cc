#include "tools/jobs/simulate/sim_model.h"

#include <algorithm>
#include <fstream>
#include <numeric>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "autograd/base/error.h"
#include "autograd/nn/models/zoo.h"
#include "tools/jobs/bucket_plans.h"
#include "tools/torch_formats/plan_file.h"

namespace ddpkit::jobs::sim {

using torch_formats::PlanFile;
using torch_formats::PlanTensor;
using torch_formats::ReadPlanFile;
namespace {

std::vector<size_t> ReverseOrder(size_t n) {
  std::vector<size_t> order(n);
  std::iota(order.rbegin(), order.rend(), 0);
  return order;
}

absl::Status CheckPermutation(const std::vector<size_t>& order, size_t n) {
  std::vector<bool> seen(n, false);
  for (size_t i : order) {
    if (i >= n || seen[i]) {
      return absl::InvalidArgumentError(
          StrCat("the grad-ready order is not a permutation of ", n, " parameters"));
    }
    seen[i] = true;
  }
  return order.size() == n
             ? absl::OkStatus()
             : absl::InvalidArgumentError(StrCat("the grad-ready order has ", order.size(),
                                                 " entries for ", n, " parameters"));
}

absl::StatusOr<std::vector<int64_t>> ParseShape(std::string_view text) {
  std::vector<int64_t> shape;
  if (text == "scalar") return shape;
  for (absl::string_view part : absl::StrSplit(absl::string_view(text.data(), text.size()), 'x')) {
    int64_t d;
    if (!absl::SimpleAtoi(part, &d) || d < 0) {
      return absl::InvalidArgumentError(StrCat("bad shape '", std::string(text), "'"));
    }
    shape.push_back(d);
  }
  return shape;
}

// A plan file's DDP order (indices among the trained parameters) in registration indices,
// the frozen parameters after it (FromParams drops them); empty when the file logged none.
std::vector<size_t> RegistrationOrder(const PlanFile& file) {
  std::vector<size_t> order;
  if (!file.ddp || file.ddp->prev_iteration_grad_ready_order_indices.empty()) return order;
  const std::vector<size_t> positions = file.DdpParameters();
  for (int64_t i : file.ddp->prev_iteration_grad_ready_order_indices) {
    order.push_back(positions[static_cast<size_t>(i)]);
  }
  for (size_t i = 0; i < file.parameters.size(); ++i) {
    if (!file.parameters[i].requires_grad) order.push_back(i);
  }
  return order;
}

// Forward FLOPs at `batch` samples: half the file's backward FLOPs, or a guess from the shape.
double PlanForwardFlops(const PlanFile& file, const PlanTensor& t, int batch) {
  const double per_sample_scale =
      file.input_shape.empty() ? 1.0 : static_cast<double>(batch) / file.input_shape[0];
  if (t.backward_flops) return *t.backward_flops / 2 * per_sample_scale;
  return (t.shape.size() >= 2 ? 2.0 : 1.0) * static_cast<double>(t.numel) * batch;
}

}  // namespace

int64_t SimParam::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<reducer::BucketTensorSpec> SimModel::Specs() const {
  std::vector<reducer::BucketTensorSpec> specs;
  for (const SimParam& p : params) specs.push_back({p.numel(), p.dtype});
  return specs;
}

double SimModel::BackwardUs() const {
  double us = backward_tail_us;
  for (const SimParam& p : params) us += p.backward_us;
  return us;
}

int64_t SimModel::TotalBytes() const {
  int64_t bytes = 0;
  for (const SimParam& p : params) bytes += static_cast<int64_t>(p.nbytes());
  return bytes;
}

absl::StatusOr<SimModel> FromParams(const std::vector<std::string>& names,
                                    const std::vector<std::vector<int64_t>>& shapes,
                                    const std::vector<DType>& dtypes,
                                    const std::vector<bool>& requires_grad,
                                    const std::vector<size_t>& grad_ready_order) {
  const size_t n = names.size();
  if (shapes.size() != n || dtypes.size() != n ||
      (!requires_grad.empty() && requires_grad.size() != n)) {
    return absl::InvalidArgumentError("names, shapes, dtypes and requires_grad differ in length");
  }
  SimModel model;
  std::vector<int64_t> renumber(n, -1);  // registration index -> index among trained ones
  for (size_t i = 0; i < n; ++i) {
    if (!requires_grad.empty() && !requires_grad[i]) continue;
    renumber[i] = static_cast<int64_t>(model.params.size());
    model.params.push_back({.name = names[i], .shape = shapes[i], .dtype = dtypes[i]});
  }
  if (model.params.empty()) return absl::InvalidArgumentError("the model has no trained parameter");
  if (grad_ready_order.empty()) {
    model.grad_ready_order = ReverseOrder(model.params.size());
    return model;
  }
  DDPKIT_RETURN_IF_ERROR(CheckPermutation(grad_ready_order, n));
  for (size_t i : grad_ready_order) {
    if (renumber[i] >= 0) model.grad_ready_order.push_back(static_cast<size_t>(renumber[i]));
  }
  model.order_estimated = false;
  return model;
}

// A resnet: or gpt: spec: its parameters as ddpkit builds them, the order DDP observes on a
// world of one, and no FLOPs (its times come from a trace: --calibrate or --compute trace=).
absl::StatusOr<SimModel> FromZooSpec(const std::string& spec) {
  DDPKIT_ASSIGN_OR_RETURN(const models::ModelSpec parsed, models::ParseModel(spec));
  const std::shared_ptr<nn::Module> module = models::MakeModel(parsed, 0);
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<DType> dtypes;
  for (const auto& [name, tensor] : module->NamedParameters()) {
    names.push_back(name);
    shapes.push_back(tensor.shape());
    dtypes.push_back(tensor.dtype());
  }
  DDPKIT_ASSIGN_OR_RETURN(const ModelBuckets plans, ModelBucketPlans(spec, {}));
  const std::vector<size_t> order(plans.grad_ready_order().begin(), plans.grad_ready_order().end());
  DDPKIT_ASSIGN_OR_RETURN(SimModel model, FromParams(names, shapes, dtypes, {}, order));
  model.name = spec;
  model.flops_unknown = true;
  return model;
}

absl::StatusOr<SimModel> FromMlpSpec(const std::string& spec, int batch) {
  if (absl::StartsWith(spec, "resnet:") || absl::StartsWith(spec, "gpt:")) return FromZooSpec(spec);
  DDPKIT_ASSIGN_OR_RETURN(const nn::MlpSpec mlp, nn::ParseModelSpec(spec));
  if (mlp.unused || mlp.tied) {
    return absl::InvalidArgumentError("simulate takes plain mlp: specs (no unused or tied)");
  }
  // DDP's own run on a world of one gives the names and the order gradients arrive in.
  DDPKIT_ASSIGN_OR_RETURN(const ModelBuckets plans, ModelBucketPlans(spec, {}));
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  for (size_t layer = 0; layer + 1 < mlp.widths.size(); ++layer) {
    const int64_t in = mlp.widths[layer], out = mlp.widths[layer + 1];
    names.push_back(StrCat(2 * layer, ".weight"));
    shapes.push_back({out, in});
    if (!mlp.bias) continue;
    names.push_back(StrCat(2 * layer, ".bias"));
    shapes.push_back({out});
  }
  const std::vector<size_t> order(plans.grad_ready_order().begin(), plans.grad_ready_order().end());
  DDPKIT_ASSIGN_OR_RETURN(
      SimModel model,
      FromParams(names, shapes, std::vector<DType>(names.size(), DType::kFloat32), {}, order));
  for (SimParam& p : model.params) {
    // A weight's GEMM is 2·B·in·out; a bias adds B·out.
    p.forward_flops = (p.shape.size() == 2 ? 2.0 : 1.0) * batch * static_cast<double>(p.numel());
  }
  model.name = spec;
  return model;
}

absl::StatusOr<SimModel> FromParamTable(const std::string& path, int batch) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(StrCat("cannot read parameter table ", path));
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<DType> dtypes;
  std::vector<double> flops;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string name, dtype, shape;
    double f = 0;
    if (!(fields >> name >> dtype >> shape >> f)) {
      return absl::InvalidArgumentError(StrCat(path, ": bad line '", line, "'"));
    }
    DDPKIT_ASSIGN_OR_RETURN(const DType d, ParseDType(dtype));
    DDPKIT_ASSIGN_OR_RETURN(std::vector<int64_t> s, ParseShape(shape));
    names.push_back(name), dtypes.push_back(d), shapes.push_back(std::move(s));
    flops.push_back(f * batch);
  }
  DDPKIT_ASSIGN_OR_RETURN(SimModel model, FromParams(names, shapes, dtypes, {}));
  for (size_t i = 0; i < flops.size(); ++i) model.params[i].forward_flops = flops[i];
  model.name = path.substr(path.find_last_of('/') + 1);
  return model;
}

absl::StatusOr<SimModel> FromPlanFile(const std::string& path, int batch) {
  DDPKIT_ASSIGN_OR_RETURN(const PlanFile file, ReadPlanFile(path));
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<DType> dtypes;
  std::vector<bool> requires_grad;
  std::vector<double> flops;
  for (const PlanTensor& t : file.parameters) {
    absl::StatusOr<DType> dtype = ParseDType(t.dtype);
    if (t.requires_grad && (!dtype.ok() || !IsFloatingPoint(*dtype))) {
      return absl::InvalidArgumentError(
          StrCat(path, ": parameter ", t.name, " requires a gradient but is ", t.dtype));
    }
    names.push_back(t.name), shapes.push_back(t.shape), requires_grad.push_back(t.requires_grad);
    dtypes.push_back(dtype.ok() ? *dtype : DType::kFloat32);  // a frozen one is dropped anyway
    if (t.requires_grad) flops.push_back(PlanForwardFlops(file, t, batch));
  }
  DDPKIT_ASSIGN_OR_RETURN(
      SimModel model, FromParams(names, shapes, dtypes, requires_grad, RegistrationOrder(file)));
  for (size_t i = 0; i < flops.size(); ++i) model.params[i].forward_flops = flops[i];
  model.flops_source =
      file.HasFlops()
          ? StrCat("the plan file's FLOPs at input [", absl::StrJoin(file.input_shape, ","),
                   "], scaled to ", batch, " per rank")
          : "FLOPs ESTIMATED: the plan file carries none, so each tensor counts 2 x numel x "
            "batch (1 x for 1-d); export_ddp_plan.py --input-shape records them";
  model.name = StrCat(path.substr(path.find_last_of('/') + 1), " (", file.model, ")");
  model.recorded_rules = file.rules_version;
  model.recorded_rules_note = file.rules_note;
  return model;
}

}  // namespace ddpkit::jobs::sim
