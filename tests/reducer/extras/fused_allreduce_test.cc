// FusedGradientAllreduce: averaging every gradient by hand after backward, as a loop under
// no_sync does when reentrant recompute keeps DDP's reducer out of backward.
#include "reducer/extras/fused_allreduce.h"

#include "gmock/gmock.h"
#include "tests/reducer/ddp_test_util.h"
#include "tests/reducer/test_models.h"

namespace ddpkit::reducer::testing {
namespace {

constexpr int kWorld = 2;
constexpr int64_t kRows = 3;  // per rank

// The case plain DDP cannot do (a layer under two checkpointed calls fires its hooks twice):
// no_sync + the fused allreduce equals one process on every rank's rows.
TEST(FusedGradientAllreduceTest, EqualsOneProcessOnTheGlobalBatch) {
  Grads expected;
  {
    TwiceCheckpointedNet net(5);
    Tensor x = Concat({RandomRows(kRows, 4, 0), RandomRows(kRows, 4, 1)});
    Tensor y = Tensor::Empty({kWorld * kRows}, DType::kInt64);
    for (int r = 0; r < kWorld; ++r) {
      y.Rows(r * kRows, (r + 1) * kRows).CopyFrom(Labels(kRows, 3, r));
    }
    CrossEntropy(net.Forward(x), y).Backward();
    expected = GradsOf(net);
  }
  std::mutex mu;
  std::vector<Grads> got(kWorld);
  RunWorld(kWorld, [&](comm::ProcessGroup& group) {
    auto net = std::make_shared<TwiceCheckpointedNet>(5);
    auto ddp = MakeDdp(net, group);
    FusedGradientAllreduce fused(net->NamedParameters());
    {
      auto no_sync = ddp->NoSync();
      CrossEntropy(ddp->Forward(RandomRows(kRows, 4, group.rank())), Labels(kRows, 3, group.rank()))
          .Backward();
    }
    ASSERT_TRUE(fused.Run(group).ok());
    std::lock_guard<std::mutex> lock(mu);
    got[group.rank()] = GradsOf(*net);
  });
  for (const Grads& g : got) EXPECT_TRUE(GradsClose(g, expected, 1e-12, 1e-14));
}

// The same numbers as DDP's own reduction (static_graph here), bit for bit: each element is
// divided by the world size, then summed in the same rank order, whatever the buffer layout.
TEST(FusedGradientAllreduceTest, BitwiseEqualToDdpStaticGraph) {
  std::mutex mu;
  Grads fused_grads, ddp_grads;
  RunWorld(kWorld, [&](comm::ProcessGroup& group) {
    for (const bool fused : {true, false}) {
      auto net = std::make_shared<TwiceCheckpointedNet>(5);
      auto ddp = MakeDdp(net, group, {.static_graph = !fused});
      FusedGradientAllreduce fused_allreduce(net->NamedParameters());
      {
        std::optional<DistributedDataParallel::NoSyncGuard> no_sync;
        if (fused) no_sync.emplace(*ddp);
        CrossEntropy(ddp->Forward(RandomRows(kRows, 4, group.rank())), Labels(kRows, 3, 0))
            .Backward();
      }
      if (fused) {
        ASSERT_TRUE(fused_allreduce.Run(group).ok());
      }
      std::lock_guard<std::mutex> lock(mu);
      if (group.rank() == 0) {
        (fused ? fused_grads : ddp_grads) = GradsOf(*net);
      }
    }
  });
  EXPECT_EQ(fused_grads, ddp_grads);
}

// Parameters of two dtypes: one flat buffer each. A parameter with no gradient on a rank
// sends zeros, so every rank sends the same layout and gets the average.
class TwoDtypes : public nn::Module {
 public:
  TwoDtypes() {
    a = RegisterParameter("a", Tensor::Zeros({3}, DType::kFloat32));
    b = RegisterParameter("b", Tensor::Zeros({2, 2}, DType::kFloat64));
    c = RegisterParameter("c", Tensor::Zeros({2}, DType::kFloat32));
  }
  Tensor Forward(const Tensor& x) override { return x; }
  Tensor a, b, c;

 private:
  std::string Describe() const override { return "TwoDtypes"; }
};

TEST(FusedGradientAllreduceTest, OneBufferPerDtypeAndMissingGradientsCountAsZero) {
  RunWorld(kWorld, [&](comm::ProcessGroup& group) {
    TwoDtypes m;
    FusedGradientAllreduce fused(m.NamedParameters());
    EXPECT_EQ(fused.bytes(), (3 + 2) * 4 + 4 * 8);
    const double r = group.rank() + 1;  // 1 and 2
    m.a.set_grad(Tensor::Full({3}, r, DType::kFloat32));
    m.b.set_grad(Tensor::Full({2, 2}, 10 * r, DType::kFloat64));
    if (group.rank() == 0) m.c.set_grad(Tensor::Full({2}, 4, DType::kFloat32));
    ASSERT_TRUE(fused.Run(group).ok());
    EXPECT_EQ(m.a.grad().ToDoubles(), std::vector<double>(3, 1.5));
    EXPECT_EQ(m.b.grad().ToDoubles(), std::vector<double>(4, 15));
    EXPECT_EQ(m.c.grad().ToDoubles(), std::vector<double>(2, 2));  // (4 + 0) / 2
    EXPECT_EQ(m.b.grad().dtype(), DType::kFloat64);
  });
}

// A rank that never joins the allreduce: the others get the collective's error within the
// timeout instead of hanging.
TEST(FusedGradientAllreduceTest, AMissingRankIsAnErrorNotAHang) {
  absl::Status status = RunWorldStatus(
      kWorld,
      [&](comm::ProcessGroup& group) {
        TwoDtypes m;
        if (group.rank() == 1) return;
        absl::Status s = FusedGradientAllreduce(m.NamedParameters()).Run(group);
        if (!s.ok()) ThrowStatus(s);
      },
      absl::Seconds(1));
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("ALLREDUCE"));
}

}  // namespace
}  // namespace ddpkit::reducer::testing
