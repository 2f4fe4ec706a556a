#include "tools/checkpoint/rank_vote.h"

#include "absl/strings/str_join.h"
#include "autograd/base/error.h"
#include "comm/collective_tag.h"
#include "tools/common/status.h"

namespace ddpkit::checkpoint {

absl::Status AgreeOnOutcome(comm::ProcessGroup& group, const absl::Status& mine,
                            std::string_view phase) {
  Tensor failed = Tensor::Zeros({group.size()}, DType::kInt64);
  failed.data<int64_t>()[group.rank()] = mine.ok() ? 0 : 1;
  comm::ScopedCollectiveTag tag({.purpose = "job"});
  DDPKIT_RETURN_IF_ERROR(common::WaitFor(group.Allreduce(failed), StrCat("agreeing on ", phase)));
  if (!mine.ok()) return mine;
  std::vector<int> ranks;
  for (int r = 0; r < group.size(); ++r) {
    if (failed.data<int64_t>()[r] != 0) ranks.push_back(r);
  }
  if (ranks.empty()) return absl::OkStatus();
  return absl::AbortedError(StrCat(phase, " failed on rank(s) ", absl::StrJoin(ranks, ", "),
                                   " (their error says why); rank ", group.rank(), " stops too"));
}

absl::StatusOr<std::vector<int64_t>> BroadcastFromRankZero(comm::ProcessGroup& group,
                                                           std::vector<int64_t> values,
                                                           std::string_view what) {
  Tensor t = Tensor::FromVector<int64_t>(absl::MakeConstSpan(values),
                                         {static_cast<int64_t>(values.size())});
  comm::ScopedCollectiveTag tag({.purpose = "job"});
  DDPKIT_RETURN_IF_ERROR(common::WaitFor(group.Broadcast(t, 0), what));
  for (size_t i = 0; i < values.size(); ++i) values[i] = t.data<int64_t>()[i];
  return values;
}

}  // namespace ddpkit::checkpoint
