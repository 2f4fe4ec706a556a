#include "comm/ops/all_gather_with_grad.h"

#include "autograd/base/error.h"
#include "autograd/function.h"
#include "autograd/ops.h"

namespace ddpkit::comm {

std::string_view GatherBackwardName(GatherBackward mode) {
  switch (mode) {
    case GatherBackward::kSum: return "sum";
    case GatherBackward::kAllreduceSlice: return "allreduce_slice";
    case GatherBackward::kSlice: return "slice";
    case GatherBackward::kNone: return "none";
    case GatherBackward::kAvg: return "avg";
  }
  return "?";
}

absl::StatusOr<GatherBackward> ParseGatherBackward(std::string_view name) {
  for (GatherBackward mode : kAllGatherBackwards) {
    if (GatherBackwardName(mode) == name) return mode;
  }
  return absl::InvalidArgumentError(StrCat("unknown gather backward '", name,
                                           "'; expected sum, allreduce_slice, slice, none or avg"));
}

namespace {

void Wait(const std::shared_ptr<Work>& work, int rank, std::string_view what) {
  if (absl::Status s = work->Wait(); !s.ok()) {
    throw Error(StrCat("[all_gather_with_grad] rank ", rank, ": ", what, " failed: ", s.message()),
                s.code());
  }
}

}  // namespace

GatheredRows AllGatherWithGrad(const Tensor& x, ProcessGroup& group, GatherBackward backward) {
  DDPKIT_CHECK(
      x.defined() && x.dim() == 2 && IsFloatingPoint(x.dtype()),
      "[all_gather_with_grad] expects rows [b, d] of float32/float64, got ",
      x.defined() ? StrCat(DTypeName(x.dtype()), ShapeString(x.shape())) : "an undefined tensor");
  const int rank = group.rank(), world = group.size();
  const int64_t d = x.size(1);

  // Every rank's row count (they may differ), checking that d and the dtype agree.
  Tensor mine = Tensor::FromVector<int64_t>({x.size(0), d, static_cast<int64_t>(x.dtype())}, {3});
  Tensor shapes = Tensor::Zeros({3 * world}, DType::kInt64);
  Wait(group.Allgather(mine, shapes), rank, "exchanging row counts");
  GatheredRows out;
  std::vector<int64_t> counts;  // elements per rank
  for (int r = 0; r < world; ++r) {
    const int64_t* s = shapes.data<int64_t>() + 3 * r;
    DDPKIT_CHECK(s[1] == d && s[2] == static_cast<int64_t>(x.dtype()),
                 "[all_gather_with_grad] rank ", rank, " has rows of ", d, " ",
                 DTypeName(x.dtype()), " but rank ", r, " has ", s[1], " ",
                 DTypeName(static_cast<DType>(s[2])), "; every rank must gather the same features");
    if (r < rank) out.first_row += s[0];
    out.rows_per_rank.push_back(s[0]);
    counts.push_back(s[0] * d);
  }
  int64_t total = 0;
  for (int64_t b : out.rows_per_rank) total += b;
  out.all = Tensor::Empty({total, d}, x.dtype(), x.device());
  Wait(group.AllgatherV(x.Detach().Flatten(), out.all.Flatten(), counts), rank,
       "gathering the rows");
  if (backward == GatherBackward::kNone) return out;

  // Backward: the gradient w.r.t. all B rows in, the gradient w.r.t. this rank's b rows out.
  const int64_t first = out.first_row, b = x.size(0);
  RecordOp(out.all, "AllGatherWithGradBackward", {&x},
           [&group, backward, counts, first, b, d, rank, world](const Tensor& g) {
             Tensor grad = g.Clone();  // never reduce into the engine's gradient buffer
             Tensor mine = Tensor::Empty({b, d}, g.dtype(), g.device());
             switch (backward) {
               case GatherBackward::kSum:
               case GatherBackward::kAvg:
                 Wait(group.ReduceScatter(grad.Flatten(), mine.Flatten(), counts), rank,
                      "reduce_scatter of the gathered rows' gradient");
                 if (backward == GatherBackward::kAvg) mine = mine.Detach() * (1.0 / world);
                 break;
               case GatherBackward::kAllreduceSlice:
                 Wait(group.Allreduce(grad), rank, "allreduce of the gathered rows' gradient");
                 mine.CopyFrom(grad.Rows(first, first + b));
                 break;
               case GatherBackward::kSlice: mine.CopyFrom(grad.Rows(first, first + b)); break;
               case GatherBackward::kNone: break;
             }
             return TensorList{mine};
           });
  return out;
}

}  // namespace ddpkit::comm
