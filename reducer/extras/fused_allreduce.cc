#include "reducer/extras/fused_allreduce.h"

#include "autograd/kernels.h"
#include "comm/collective_tag.h"

namespace ddpkit::reducer {

FusedGradientAllreduce::FusedGradientAllreduce(const NamedTensors& parameters) {
  std::vector<int64_t> sizes;  // per flat
  for (const auto& [name, parameter] : parameters) {
    size_t i = 0;
    while (i < flats_.size() && (flats_[i].buffer.dtype() != parameter.dtype() ||
                                 flats_[i].buffer.device() != parameter.device()))
      ++i;
    if (i == flats_.size()) {
      flats_.push_back({.buffer = Tensor::Empty({0}, parameter.dtype(), parameter.device()),
                        .parameters = {}});  // the dtype, for now
      sizes.push_back(0);
    }
    flats_[i].parameters.emplace_back(parameter, sizes[i]);
    sizes[i] += parameter.numel();
  }
  for (size_t i = 0; i < flats_.size(); ++i) {
    flats_[i].buffer =
        Tensor::Empty({sizes[i]}, flats_[i].buffer.dtype(), flats_[i].buffer.device());
  }
}

absl::Status FusedGradientAllreduce::Run(comm::ProcessGroup& group) {
  for (size_t i = 0; i < flats_.size(); ++i) {
    Flat& flat = flats_[i];
    for (const auto& [parameter, offset] : flat.parameters) {
      Tensor slice = flat.buffer.Rows(offset, offset + parameter.numel());
      if (parameter.grad().defined()) {
        slice.CopyFrom(parameter.grad().Flatten());
      } else {
        slice.Zero();
      }
    }
    ScaleInPlace(flat.buffer, 1.0 / group.size());
    // Traces and flight records show it as what it is: one bucket holding every gradient.
    comm::ScopedCollectiveTag tag({.purpose = "bucket", .bucket = static_cast<int32_t>(i)});
    if (absl::Status s = group.Allreduce(flat.buffer)->Wait(); !s.ok()) return s;
    for (const auto& [parameter, offset] : flat.parameters) {
      Tensor average = flat.buffer.Rows(offset, offset + parameter.numel()).View(parameter.shape());
      if (!parameter.grad().defined())
        parameter.set_grad(Tensor::Empty(parameter.shape(), parameter.dtype(), parameter.device()));
      parameter.grad().CopyFrom(average);
    }
  }
  return absl::OkStatus();
}

int64_t FusedGradientAllreduce::bytes() const {
  int64_t total = 0;
  for (const Flat& flat : flats_) total += static_cast<int64_t>(flat.buffer.nbytes());
  return total;
}

}  // namespace ddpkit::reducer
