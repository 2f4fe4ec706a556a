#include "comm/ops/sync_batch_norm.h"

#include <string_view>
#include <vector>

#include "autograd/base/error.h"
#include "comm/collective_tag.h"

namespace ddpkit::comm {
namespace {

class ProcessGroupBatchNormSync : public BatchNormSync {
 public:
  explicit ProcessGroupBatchNormSync(ProcessGroup& group) : group_(group) {}

  void SumAcrossRanks(std::vector<double>& values, std::string_view what) override {
    if (group_.size() == 1) return;  // PyTorch's SyncBatchNorm issues nothing at world 1
    ScopedCollectiveTag tag({.purpose = "sync_batch_norm"});  // named in dumps and traces
    Tensor sums = Tensor::FromVector<double>(values, {static_cast<int64_t>(values.size())});
    if (absl::Status s = group_.Allreduce(sums)->Wait(); !s.ok()) {
      throw Error(StrCat("[sync_batch_norm] rank ", group_.rank(), ": the allreduce of ", what,
                         " failed: ", s.message(),
                         " (SyncBatchNorm needs every rank in every training forward and "
                         "backward; a rank that has finished or joined cannot take part)"),
                  s.code());
    }
    values.assign(sums.data<double>(), sums.data<double>() + values.size());
  }

 private:
  ProcessGroup& group_;
};

}  // namespace

std::shared_ptr<BatchNormSync> MakeBatchNormSync(ProcessGroup& group) {
  return std::make_shared<ProcessGroupBatchNormSync>(group);
}

SyncBatchNorm::SyncBatchNorm(int64_t num_features, ProcessGroup& group, DType dtype)
    : BatchNorm2d(num_features, dtype) {
  SetSync(MakeBatchNormSync(group));
}

int ConvertSyncBatchNorm(nn::Module& module, ProcessGroup& group) {
  std::shared_ptr<BatchNormSync> sync = MakeBatchNormSync(group);  // one for all: it is stateless
  int converted = 0;
  module.Apply([&](nn::Module& m) {
    if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(&m)) {
      bn->SetSync(sync);
      ++converted;
    }
  });
  return converted;
}

}  // namespace ddpkit::comm
