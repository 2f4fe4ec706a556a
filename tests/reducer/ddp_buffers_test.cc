// DDP's buffers on a real model (torchvision's ResNet, autograd/nn/models/resnet.h): BatchNorm's
// running statistics are rank 0's on every rank after each synced forward (broadcast_buffers,
// PyTorch's default), and stay each rank's own when it is off.
#include <map>
#include <mutex>

#include "autograd/nn/models/resnet.h"
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

// The broadcasts each rank recorded under `purpose`, as (dtype, element count), oldest first.
std::vector<std::pair<DType, int64_t>> Broadcasts(const comm::ProcessGroup& group,
                                                  std::string_view purpose) {
  std::vector<std::pair<DType, int64_t>> out;
  for (const comm::FlightRecorder::Entry& e : group.flight_recorder().Entries()) {
    if (e.op == comm::OpType::kBroadcast && e.tag.purpose == purpose)
      out.push_back({e.dtype, e.count});
  }
  return out;
}

// PyTorch's _broadcast_coalesced: the construction's parameters and buffers, and each forward's
// buffers, travel in one flat broadcast per dtype (250 MiB buckets), in the order of each
// dtype's first tensor: float32 (weights, running statistics), then int64 (num_batches_tracked).
TEST(DdpBuffersTest, BuffersTravelInOneBroadcastPerDtypeAsPyTorchCoalescesThem) {
  std::mutex mu;
  std::vector<std::vector<std::pair<DType, int64_t>>> at_construction, at_forward;
  int64_t float_state = 0, statistics = 0, counters = 0;
  RunWorld(2, [&](comm::ProcessGroup& group) {
    auto model = SmallResNet();
    auto ddp = MakeDdp(model, group, {});
    const auto constructed = Broadcasts(group, "model_broadcast");
    ddp->Forward(Tensor::Full({2, 1, 8, 8}, 0.5));
    std::lock_guard<std::mutex> lock(mu);
    at_construction.push_back(constructed);
    at_forward.push_back(Broadcasts(group, "buffer_broadcast"));
    if (group.rank() != 0) return;
    for (const auto& [name, p] : model->NamedParameters()) float_state += p.numel();
    for (const auto& [name, b] : model->NamedBuffers()) {
      (b.dtype() == DType::kInt64 ? counters : statistics) += b.numel();
    }
    float_state += statistics;
  });
  ASSERT_GT(counters, 1);  // one num_batches_tracked per BatchNorm: more than one tensor
  const std::vector<std::pair<DType, int64_t>> construction = {{DType::kFloat32, float_state},
                                                               {DType::kInt64, counters}};
  const std::vector<std::pair<DType, int64_t>> forward = {{DType::kFloat32, statistics},
                                                          {DType::kInt64, counters}};
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(at_construction[r], construction);
    EXPECT_EQ(at_forward[r], forward);
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
