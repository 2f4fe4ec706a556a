// A ResNet converted to SyncBatchNorm under DDP on W ranks against the same ResNet with plain
// BatchNorm on one process over the global batch, in float64: the loss, every gradient and every
// buffer agree — the one case where a BatchNorm model under DDP is exactly one process (plain
// BatchNorm normalises each rank's shard by its own statistics). Equal and uneven shards.
#include <numeric>

#include "autograd/nn/models/resnet.h"
#include "comm/ops/sync_batch_norm.h"
#include "gmock/gmock.h"
#include "join/join.h"
#include "tests/reducer/ddp_test_util.h"

namespace ddpkit::reducer::testing::ddp_sync_batch_norm_test {
namespace {

std::shared_ptr<nn::ResNet> SmallResNet() {
  return nn::MakeResNet(*nn::ParseResNetSpec("resnet:1,1,1,1,width=2,in=1,classes=3,stem=small"),
                        /*seed=*/0, DType::kFloat64);
}

struct StepResult {
  double loss = 0;
  Grads grads;
  std::map<std::string, std::vector<double>> buffers;
};

// Two iterations (gradients reset before each) of `forward` on rows [first, first + rows) of x;
// the loss is CrossEntropy times `scale`; the second iteration's loss and gradients, then the
// buffers.
StepResult TwoIterations(nn::Module& model, const std::function<Tensor(const Tensor&)>& forward,
                         const Tensor& x, const Tensor& y, int64_t first, int64_t rows,
                         double scale) {
  StepResult res;
  for (int it = 0; it < 2; ++it) {
    for (const Tensor& p : model.Parameters()) p.set_grad(Tensor());
    Tensor loss = CrossEntropy(forward(x.Rows(first, first + rows).Clone()),
                               y.Rows(first, first + rows).Clone());
    res.loss = loss.item();
    (loss * scale).Backward();
  }
  res.grads = GradsOf(model);
  for (const auto& [name, b] : model.NamedBuffers()) {
    res.buffers[name] = b.To(DType::kFloat64).ToDoubles();
  }
  return res;
}

void ExpectSyncDdpEqualsOneProcess(const std::vector<int64_t>& rows) {
  const int world = static_cast<int>(rows.size());
  const int64_t n = std::accumulate(rows.begin(), rows.end(), int64_t{0});
  Tensor x = Tensor::Empty({n, 1, 6, 6}, DType::kFloat64);
  Generator gen(5);
  gen.FillNormal(x);
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < n; ++i) labels.push_back(i % 3);
  const Tensor y = Tensor::FromVector<int64_t>(labels, {n});

  auto reference = SmallResNet();
  const StepResult want = TwoIterations(
      *reference, [&](const Tensor& in) { return reference->Forward(in); }, x, y, 0, n, 1.0);

  std::mutex mu;
  std::vector<StepResult> got(world);
  RunWorld(world, [&](comm::ProcessGroup& group) {
    const int r = group.rank();
    const int64_t first = std::accumulate(rows.begin(), rows.begin() + r, int64_t{0});
    auto model = SmallResNet();
    EXPECT_EQ(comm::ConvertSyncBatchNorm(*model, group), 12);
    auto ddp = MakeDdp(model, group);
    // DDP averages over ranks; rank r's rows are rows[r] / n of the global mean loss.
    const double share = static_cast<double>(rows[r]) / static_cast<double>(n);
    StepResult res = TwoIterations(
        *model, [&](const Tensor& in) { return ddp->Forward(in); }, x, y, first, rows[r],
        share * world);
    res.loss *= share;
    std::lock_guard<std::mutex> lock(mu);
    got[r] = std::move(res);
  });
  double loss = 0;
  for (int r = 0; r < world; ++r) {
    SCOPED_TRACE(StrCat("rank ", r));
    loss += got[r].loss;
    EXPECT_TRUE(GradsClose(got[r].grads, want.grads, 1e-9, 1e-12));
    ASSERT_EQ(got[r].buffers.size(), want.buffers.size());
    for (const auto& [name, values] : want.buffers) {
      for (size_t i = 0; i < values.size(); ++i) {
        EXPECT_NEAR(got[r].buffers[name][i], values[i], 1e-10 * (1 + std::fabs(values[i]))) << name;
      }
    }
  }
  EXPECT_NEAR(loss, want.loss, 1e-12 * std::fabs(want.loss));
}

TEST(DdpSyncBatchNormTest, ResNetOnWRanksEqualsOneProcessOnTheGlobalBatch) {
  ExpectSyncDdpEqualsOneProcess({2, 2});
  ExpectSyncDdpEqualsOneProcess({2, 2, 2, 2});
}

TEST(DdpSyncBatchNormTest, UnevenShardsToo) { ExpectSyncDdpEqualsOneProcess({1, 3, 2}); }

// Rank 1 has one batch, rank 0 two, under Join. In iteration 1 rank 1 has joined: it shadows
// DDP's collectives but never runs the model, so rank 0's SyncBatchNorm allreduce meets rank 1's
// shadow of DDP's gradient allreduce. Plain Join cannot save the run; it must fail (not hang)
// naming SyncBatchNorm's collective. Throw mode stops both ranks in iteration 1.
void RunUnevenUnderJoin(comm::ProcessGroup& group, bool throw_mode, int& stopped_at) {
  auto model = SmallResNet();
  comm::ConvertSyncBatchNorm(*model, group);
  auto ddp = MakeDdp(model, group);
  Tensor x = Tensor::Full({2, 1, 6, 6}, 0.5, DType::kFloat64),
         y = Tensor::FromVector<int64_t>({0, 1}, {2});
  x.data<double>()[group.rank()] = 3.0;  // a batch with some spread
  join::Join::Run({ddp.get()}, {.throw_on_early_termination = throw_mode}, [&] {
    for (stopped_at = 0; stopped_at < 2 - group.rank(); ++stopped_at) {
      CrossEntropy(ddp->Forward(x), y).Backward();
    }
  });
}

TEST(DdpSyncBatchNormTest, UnderPlainJoinTheRunFailsNamingTheCollective) {
  absl::Status status = RunWorldStatus(
      2,
      [](comm::ProcessGroup& group) {
        int stopped_at = 0;
        RunUnevenUnderJoin(group, /*throw_mode=*/false, stopped_at);
      },
      absl::Seconds(10));
  ASSERT_FALSE(status.ok()) << "a joined rank cannot take part in SyncBatchNorm's allreduce";
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("sync_batch_norm"));
}

TEST(DdpSyncBatchNormTest, ThrowModeStopsEveryRankWhenTheFirstRunsOut) {
  std::mutex mu;
  std::vector<int> stopped(2, -1);
  std::vector<absl::StatusCode> codes(2, absl::StatusCode::kOk);
  RunWorld(2, [&](comm::ProcessGroup& group) {
    int stopped_at = -1;
    absl::StatusCode code = absl::StatusCode::kOk;
    try {
      RunUnevenUnderJoin(group, /*throw_mode=*/true, stopped_at);
    } catch (const Error& e) {
      code = e.code();
    }
    std::lock_guard<std::mutex> lock(mu);
    stopped[group.rank()] = stopped_at;
    codes[group.rank()] = code;
  });
  EXPECT_EQ(stopped, (std::vector<int>{1, 1}));
  EXPECT_EQ(codes, std::vector<absl::StatusCode>(2, absl::StatusCode::kAborted));
}

}  // namespace
}  // namespace ddpkit::reducer::testing::ddp_sync_batch_norm_test
