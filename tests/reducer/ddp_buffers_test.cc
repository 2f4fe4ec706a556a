// DDP's buffers on a real model (torchvision's ResNet, autograd/models/resnet.h): BatchNorm's
// running statistics are rank 0's on every rank after each synced forward (broadcast_buffers,
// PyTorch's default), and stay each rank's own when it is off.
#include <map>

#include "autograd/models/resnet.h"
#include "tests/reducer/ddp_test_util.h"

namespace ddpkit::reducer::testing {
namespace {

std::shared_ptr<nn::ResNet> SmallResNet() {
  return nn::MakeResNet(*nn::ParseResNetSpec("resnet:1,1,1,1,width=2,in=1,classes=3,stem=small"),
                        /*seed=*/0);
}

// Every buffer of `model`, as doubles, by name.
std::map<std::string, std::vector<double>> Buffers(const nn::Module& model) {
  std::map<std::string, std::vector<double>> out;
  for (const auto& [name, b] : model.NamedBuffers()) out[name] = b.To(DType::kFloat64).ToDoubles();
  return out;
}

// After DDP's construction rank 1's running statistics are made different, then each rank runs one
// synced forward on its own images. The forward starts from rank 0's buffers, so the statistics
// each rank holds after it are rank 0's buffers updated with the rank's own batch: compared with
// the same update applied to rank 0's buffers on one process.
void ExpectBuffersAfterForward(bool broadcast_buffers) {
  std::vector<std::map<std::string, std::vector<double>>> after(2), expected(2);
  RunWorld(2, [&](comm::ProcessGroup& group) {
    auto model = SmallResNet();
    auto reference = SmallResNet();  // rank 0's buffers, updated by this rank's batch alone
    DdpOptions options;
    options.broadcast_buffers = broadcast_buffers;
    auto ddp = MakeDdp(model, group, options);  // (construction copies rank 0's state to all)
    if (group.rank() == 1) {
      for (const auto& [name, b] : model->NamedBuffers()) {
        if (b.dtype() == DType::kFloat32) b.CopyFrom(Tensor::Full(b.shape(), 7.0));
      }
    }
    Tensor x = Tensor::Full({2, 1, 8, 8}, 0.5 + group.rank());
    ddp->Forward(x);
    reference->Forward(x);
    after[group.rank()] = Buffers(*model);
    expected[group.rank()] = Buffers(*reference);
  });
  EXPECT_EQ(after[0], expected[0]);
  if (broadcast_buffers) {
    EXPECT_EQ(after[1], expected[1]) << "rank 1 should have started from rank 0's statistics";
  } else {
    EXPECT_NE(after[1], expected[1]) << "rank 1 kept its own statistics";
  }
}

TEST(DdpBuffersTest, RunningStatisticsAreRankZerosAtEachSyncedForward) {
  ExpectBuffersAfterForward(/*broadcast_buffers=*/true);
}

TEST(DdpBuffersTest, WithoutBroadcastEachRankKeepsItsOwn) {
  ExpectBuffersAfterForward(/*broadcast_buffers=*/false);
}

}  // namespace
}  // namespace ddpkit::reducer::testing
