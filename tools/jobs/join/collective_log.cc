#include "tools/jobs/join/collective_log.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "autograd/base/error.h"
#include "tools/jobs/job.h"

namespace ddpkit::jobs {

std::string CollectiveRecord::Describe() const {
  std::string out = absl::StrFormat("%s %s[%d]", OpTypeName(op), DTypeName(dtype), count);
  if (op == comm::OpType::kAllreduce || op == comm::OpType::kReduceScatter) {
    StrAppend(&out, " ", comm::ReduceOpName(reduce_op));
  } else if (op == comm::OpType::kBroadcast) {
    StrAppend(&out, " from ", root);
  }
  return out;
}

CollectiveTap::CollectiveTap(const comm::ProcessGroup& group) : group_(group) { Take(); }

std::vector<CollectiveRecord> CollectiveTap::Take() {
  std::vector<CollectiveRecord> out;
  for (const auto& e : group_.flight_recorder().Entries()) {
    if (e.sequence_number <= last_seen_) continue;
    last_seen_ = e.sequence_number;
    out.push_back(
        {.op = e.op, .reduce_op = e.reduce_op, .root = e.root, .dtype = e.dtype, .count = e.count});
  }
  return out;
}

ShadowRecorder::ShadowRecorder(comm::ProcessGroup& group, std::function<void()> on_iteration)
    : group_(group), on_iteration_(std::move(on_iteration)) {}

std::unique_ptr<join::JoinHook> ShadowRecorder::MakeJoinHook() {
  struct Hook final : join::JoinHook {
    explicit Hook(ShadowRecorder& r) : recorder(r) {}
    void MainHook() override { recorder.on_iteration_(); }
    ShadowRecorder& recorder;
  };
  return std::make_unique<Hook>(*this);
}

IterationLog::IterationLog(std::vector<int> inputs, int rank)
    : inputs_(std::move(inputs)),
      rank_(rank),
      iterations_(std::max(1, *std::max_element(inputs_.begin(), inputs_.end()))),
      numbers_(Tensor::Zeros({iterations_, 3}, DType::kFloat64)),
      collectives_(Tensor::Zeros({iterations_, 2, kRoleWords}, DType::kInt64)) {}

int IterationLog::Reporter(int iteration, Role role) const {
  for (int r = 0; r < static_cast<int>(inputs_.size()); ++r) {
    if ((inputs_[r] > iteration) == (role == Role::kActive)) return r;
  }
  return -1;
}

int64_t* IterationLog::Words(int iteration, Role role) const {
  return collectives_.data<int64_t>() + (iteration * 2 + static_cast<int>(role)) * kRoleWords;
}

void IterationLog::SetLoss(int iteration, double loss) {
  numbers_.data<double>()[iteration * 3] = loss;
}

void IterationLog::SetGradient(int iteration, double grad_norm, double divide_factor) {
  double* n = numbers_.data<double>() + iteration * 3;
  n[1] = grad_norm;
  n[2] = divide_factor;
}

void IterationLog::SetCollectives(int iteration, Role role,
                                  const std::vector<CollectiveRecord>& records) {
  if (iteration >= iterations_) return;
  int64_t* words = Words(iteration, role);
  const int n = std::min<int>(static_cast<int>(records.size()), kMaxCollectives);
  words[0] = n;
  for (int i = 0; i < n; ++i) {
    int64_t* w = words + 1 + i * kWordsPerCollective;
    const CollectiveRecord& r = records[i];
    w[0] = static_cast<int64_t>(r.op);
    w[1] = static_cast<int64_t>(r.reduce_op);
    w[2] = r.root;
    w[3] = static_cast<int64_t>(r.dtype);
    w[4] = r.count;
  }
}

absl::Status IterationLog::Combine(comm::ProcessGroup& group) {
  DDPKIT_RETURN_IF_ERROR(WaitFor(group.Allreduce(numbers_), "combining the iteration records"));
  return WaitFor(group.Allreduce(collectives_), "combining the collective records");
}

void IterationLog::AddToReport(int count, int stopped, JoinReport& report) const {
  auto decode = [](const int64_t* words, google::protobuf::RepeatedPtrField<std::string>* out) {
    for (int64_t i = 0; i < words[0]; ++i) {
      const int64_t* w = words + 1 + i * kWordsPerCollective;
      out->Add(CollectiveRecord{.op = static_cast<comm::OpType>(w[0]),
                                .reduce_op = static_cast<comm::ReduceOp>(w[1]),
                                .root = static_cast<int>(w[2]),
                                .dtype = static_cast<DType>(w[3]),
                                .count = w[4]}
                   .Describe());
    }
  };
  for (int i = 0; i < count; ++i) {
    JoinIteration& it = *report.add_iterations();
    it.set_iteration(i);
    for (int r = 0; r < static_cast<int>(inputs_.size()); ++r) {
      if (inputs_[r] > i) {
        it.add_active_ranks(r);
      } else {
        it.add_shadowing_ranks(r);
      }
    }
    it.set_completed(i != stopped);
    const double* n = numbers_.data<double>() + i * 3;
    it.set_loss(n[0] / static_cast<double>(it.active_ranks_size()));
    it.set_grad_norm(n[1]);
    it.set_divide_factor(n[2]);
    it.set_active_reporter(Reporter(i, Role::kActive));
    it.set_shadow_reporter(Reporter(i, Role::kShadowing));
    decode(Words(i, Role::kActive), it.mutable_active_collectives());
    decode(Words(i, Role::kShadowing), it.mutable_shadowing_collectives());
  }
}

}  // namespace ddpkit::jobs
