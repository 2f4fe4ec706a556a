#include "tools/jobs/contrastive/clip_loss.h"

#include "autograd/base/error.h"
#include "autograd/ops.h"

namespace ddpkit::jobs {

std::string_view ContrastiveLayoutName(ContrastiveLayout layout) {
  return layout == ContrastiveLayout::kLocalGlobal ? "local" : "global";
}

absl::StatusOr<ContrastiveLayout> ParseContrastiveLayout(std::string_view name) {
  if (name == "local") return ContrastiveLayout::kLocalGlobal;
  if (name == "global") return ContrastiveLayout::kGlobalGlobal;
  return absl::InvalidArgumentError(
      StrCat("unknown layout '", name, "'; expected local or global"));
}

namespace {
// 0, 1, ..., n - 1, built on the host and then put on `device` (the features').
Tensor Arange(int64_t n, Device device) {
  Tensor t = Tensor::Empty({n}, DType::kInt64);
  for (int64_t i = 0; i < n; ++i) t.data<int64_t>()[i] = i;
  return device.is_cpu() ? t : t.To(device);
}
}  // namespace

ClipLossResult ClipLoss(const Tensor& image, const Tensor& text, const Tensor& logit_scale,
                        comm::ProcessGroup& group, ContrastiveLayout layout,
                        GatherBackward backward) {
  DDPKIT_CHECK(
      image.defined() && text.defined() && image.dim() == 2 && image.shape() == text.shape(),
      "[clip_loss] image and text features must be [b, d] of one shape (pair i = row i), got ",
      image.defined() ? ShapeString(image.shape()) : "undefined", " and ",
      text.defined() ? ShapeString(text.shape()) : "undefined");
  DDPKIT_CHECK(logit_scale.defined() && logit_scale.numel() == 1,
               "[clip_loss] logit_scale must have one element");
  const comm::GatheredRows images = comm::AllGatherWithGrad(image, group, backward);
  const comm::GatheredRows texts = comm::AllGatherWithGrad(text, group, backward);
  const int64_t b = image.size(0), B = images.all.size(0);
  const Tensor scale = Exp(logit_scale);

  ClipLossResult result;
  result.global_rows = B;
  result.first_row = images.first_row;
  if (layout == ContrastiveLayout::kLocalGlobal) {
    // Rows: this rank's live features; columns: everyone's, through the gather.
    const Tensor labels = Arange(b, image.device());
    const CrossEntropyOptions ce{.target_offset = images.first_row, .reduction = Reduction::kSum};
    Tensor per_image = CrossEntropy(scale * Matmul(image, Transpose(texts.all)), labels, ce);
    Tensor per_text = CrossEntropy(scale * Matmul(text, Transpose(images.all)), labels, ce);
    result.loss = (per_image + per_text) * (static_cast<double>(group.size()) / (2.0 * B));
    result.logit_elements = 2 * b * B;
  } else {
    Tensor logits = scale * Matmul(images.all, Transpose(texts.all));
    const Tensor labels = Arange(B, image.device());
    result.loss = (CrossEntropy(logits, labels) + CrossEntropy(Transpose(logits), labels)) * 0.5;
    result.logit_elements = B * B;
  }
  return result;
}

}  // namespace ddpkit::jobs
