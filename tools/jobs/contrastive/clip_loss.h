// CLIP's symmetric InfoNCE over features spread across ranks, in the two layouts people use,
// built on comm's AllGatherWithGrad (see docs/contrastive.md for the math). It is the model-side
// loss of the contrastive job, so it lives beside it; the collective stays in comm/.
//
//   image, text: this rank's L2-normalised features [b_r, d] (pair i is image i with text i);
//   logit_scale: the learnable parameter t, one element; the logits are exp(t) · image·textᵀ.
//
// kLocalGlobal: this rank's rows against every rank's columns — [b_r, B] logits per direction,
//   labels offset by the rows on earlier ranks. Each rank's loss is scaled so that DDP's
//   average over ranks is the mean over the B global pairs, for unequal b_r too:
//   L_r = n / (2B) · (Σ_{i∈r} CE_image→text(i) + Σ_{i∈r} CE_text→image(i)).
// kGlobalGlobal: every rank builds the full [B, B] matrix from the gathered rows (its own slot
//   is live through the gather) and computes the global loss L = ½ (mean CE rows + mean CE
//   columns); its value is the same on every rank.
// With GatherBackward::kSum (or kAllreduceSlice) and DDP averaging, both give exactly the
// gradient one process gets on the concatenated batch.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "comm/ops/all_gather_with_grad.h"

namespace ddpkit::jobs {

using comm::GatherBackward;

enum class ContrastiveLayout { kLocalGlobal, kGlobalGlobal };
std::string_view ContrastiveLayoutName(ContrastiveLayout layout);  // "local", "global"
absl::StatusOr<ContrastiveLayout> ParseContrastiveLayout(std::string_view name);

struct ClipLossResult {
  Tensor loss;                 // this rank's loss (shape [])
  int64_t global_rows = 0;     // B
  int64_t first_row = 0;       // this rank's label offset
  int64_t logit_elements = 0;  // materialised logits on this rank: 2·b·B, or B² (global)
};

// Collective (two gathers). Throws ddpkit::Error for mismatched shapes or a failed collective.
ClipLossResult ClipLoss(const Tensor& image, const Tensor& text, const Tensor& logit_scale,
                        comm::ProcessGroup& group, ContrastiveLayout layout,
                        GatherBackward backward = GatherBackward::kSum);

}  // namespace ddpkit::jobs
