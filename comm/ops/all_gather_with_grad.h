// A differentiable all-gather for losses that compare every rank's rows with every other's
// (contrastive, CLIP-style): forward concatenates all ranks' rows, backward decides what each
// rank gets back for its own rows. docs/contrastive.md derives every mode.
//
//   GatheredRows texts = AllGatherWithGrad(my_text_features, group);   // [B, d], rank order
//   Tensor logits = Matmul(my_image_features, Transpose(texts.all));   // [b, B]
//   Tensor loss = CrossEntropy(logits, Arange(b), {.target_offset = texts.first_row});
//
// The gathered rows are consumed by n losses, one per rank; with DDP averaging parameter
// gradients (÷n), the gather's backward must therefore SUM, over ranks, the gradient slot of
// each rank's rows: a reduce_scatter(SUM). The other modes are kept to reproduce what
// well-known implementations did and what it costs them.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "autograd/tensor.h"
#include "comm/process_group.h"

namespace ddpkit::comm {

enum class GatherBackward {
  kSum,             // reduce_scatter(SUM): the correct one (torch.distributed.nn, open_clip)
  kAllreduceSlice,  // allreduce(SUM) of the whole gradient, then this rank's rows (ED4CT): same
                    // numbers, twice the traffic
  kSlice,           // this rank's rows of its own gradient only (the naive GatherLayer)
  kNone,            // no backward: the gathered rows are constants (a plain no-grad gather)
  kAvg,             // reduce_scatter then ÷n (Horovod's allgather gradient since 2021)
};
inline constexpr GatherBackward kAllGatherBackwards[] = {
    GatherBackward::kSum, GatherBackward::kAllreduceSlice, GatherBackward::kSlice,
    GatherBackward::kNone, GatherBackward::kAvg};

std::string_view GatherBackwardName(GatherBackward mode);  // "sum", "allreduce_slice", ...
absl::StatusOr<GatherBackward> ParseGatherBackward(std::string_view name);

struct GatheredRows {
  Tensor all;                          // every rank's rows in rank order: [Σ b_r, d]
  std::vector<int64_t> rows_per_rank;  // b_r; ranks may differ
  int64_t first_row = 0;               // where this rank's rows start in `all`
};

// Collective. x: this rank's rows [b_r, d] (float32/float64; b_r may be 0; every rank the same
// d and dtype). Throws ddpkit::Error when the ranks disagree on d or dtype, or a collective
// fails (in forward, or in backward for the modes that communicate).
GatheredRows AllGatherWithGrad(const Tensor& x, ProcessGroup& group,
                               GatherBackward backward = GatherBackward::kSum);

}  // namespace ddpkit::comm
