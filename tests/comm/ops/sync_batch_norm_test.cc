// SyncBatchNorm over per-rank shards against BatchNorm2d on one process over the global batch,
// in float64: the output, running statistics, num_batches_tracked, the input gradient, and the
// weight and bias gradients summed over ranks — equal and uneven shards, 1 to 4 ranks.
#include "comm/ops/sync_batch_norm.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <numeric>

#include "autograd/ops.h"
#include "autograd/random.h"
#include "comm/threads/threads_world.h"
#include "gtest/gtest.h"

namespace ddpkit::comm {
namespace {

constexpr int64_t kChannels = 3, kSide = 3;

Tensor Random(const Shape& shape, uint64_t seed, double mean = 0) {
  Tensor t = Tensor::Empty(shape, DType::kFloat64);
  Generator gen(seed);
  gen.FillNormal(t);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] += mean;  // E[x^2] >> Var[x]
  return t;
}

// What one step of a BatchNorm module gives: output and gradients, then its buffers.
struct BnResult {
  std::vector<double> out, dx, dw, db, running_mean, running_var;
  int64_t batches = 0;
};

// Two training steps of `bn` on x (its rows' share of the global loss Σ y ⊙ R each step), with
// weight and bias set to fixed non-trivial values; the second step's results.
BnResult TwoSteps(nn::BatchNorm2d& bn, const Tensor& x, const Tensor& r) {
  for (const auto& [name, p] : bn.NamedParameters()) {
    p.CopyFrom(Random(p.shape(), name == "weight" ? 7 : 8));
  }
  BnResult res;
  for (int step = 0; step < 2; ++step) {
    for (const Tensor& p : bn.Parameters()) p.set_grad(Tensor());
    Tensor input = x.Clone().set_requires_grad(true);
    Tensor y = bn.Forward(input);
    Sum(Mul(y, r)).Backward();
    res = {y.ToDoubles(),
           input.grad().ToDoubles(),
           bn.Parameters()[0].grad().ToDoubles(),
           bn.Parameters()[1].grad().ToDoubles(),
           bn.running_mean().ToDoubles(),
           bn.running_var().ToDoubles(),
           bn.num_batches_tracked().data<int64_t>()[0]};
  }
  return res;
}

void ExpectNear(const std::vector<double>& actual, const std::vector<double>& expected,
                const char* what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], 1e-10 * (1 + std::fabs(expected[i])))
        << what << "[" << i << "]";
  }
}

std::vector<double> Slice(const std::vector<double>& v, int64_t first_row, int64_t rows) {
  const int64_t per_row = kChannels * kSide * kSide;
  return {v.begin() + first_row * per_row, v.begin() + (first_row + rows) * per_row};
}

void ExpectSyncEqualsGlobal(const std::vector<int64_t>& rows) {
  const int world = static_cast<int>(rows.size());
  const int64_t n = std::accumulate(rows.begin(), rows.end(), int64_t{0});
  const Tensor x = Random({n, kChannels, kSide, kSide}, 1, /*mean=*/2.0);
  const Tensor r = Random(x.shape(), 2);
  nn::BatchNorm2d global(kChannels, DType::kFloat64);
  const BnResult want = TwoSteps(global, x, r);

  std::mutex mu;
  std::vector<BnResult> got(world);
  std::vector<int64_t> first(world, 0);
  for (int k = 1; k < world; ++k) first[k] = first[k - 1] + rows[k - 1];
  absl::Status status = RunThreadsWorld(world, [&](ProcessGroup& group) {
    const int k = group.rank();
    SyncBatchNorm bn(kChannels, group, DType::kFloat64);
    BnResult res =
        TwoSteps(bn, x.Rows(first[k], first[k] + rows[k]), r.Rows(first[k], first[k] + rows[k]));
    std::lock_guard<std::mutex> lock(mu);
    got[k] = std::move(res);
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
  std::vector<double> dw(kChannels, 0.0), db(kChannels, 0.0);
  for (int k = 0; k < world; ++k) {
    SCOPED_TRACE(StrCat("rank ", k));
    ExpectNear(got[k].out, Slice(want.out, first[k], rows[k]), "output");
    ExpectNear(got[k].dx, Slice(want.dx, first[k], rows[k]), "input gradient");
    ExpectNear(got[k].running_mean, want.running_mean, "running_mean");
    ExpectNear(got[k].running_var, want.running_var, "running_var");
    EXPECT_EQ(got[k].batches, 2);
    for (int64_t c = 0; c < kChannels; ++c) dw[c] += got[k].dw[c], db[c] += got[k].db[c];
  }
  // Each rank's weight and bias gradients are its own rows' share: their sum (what DDP's average
  // times the world size is) is the global one.
  ExpectNear(dw, want.dw, "weight gradient summed over ranks");
  ExpectNear(db, want.db, "bias gradient summed over ranks");
}

TEST(SyncBatchNormTest, EqualShardsEqualBatchNormOverTheGlobalBatch) {
  for (int world = 1; world <= 4; ++world) {
    SCOPED_TRACE(StrCat("world ", world));
    ExpectSyncEqualsGlobal(std::vector<int64_t>(world, 2));
  }
}

TEST(SyncBatchNormTest, UnevenShardsEqualBatchNormOverTheGlobalBatch) {
  ExpectSyncEqualsGlobal({1, 3});
  ExpectSyncEqualsGlobal({3, 1, 2, 5});
}

TEST(SyncBatchNormTest, EvaluationUsesRunningStatisticsWithoutACollective) {
  // Rank 1 never forwards: were evaluation to communicate, rank 0 would wait until the timeout.
  absl::Status status = RunThreadsWorld(2, [&](ProcessGroup& group) {
    SyncBatchNorm bn(kChannels, group, DType::kFloat64);
    bn.Eval();
    if (group.rank() == 0) {
      const Tensor x = Random({2, kChannels, kSide, kSide}, 3);
      nn::BatchNorm2d plain(kChannels, DType::kFloat64);
      plain.Eval();
      EXPECT_EQ(bn.Forward(x).ToDoubles(), plain.Forward(x).ToDoubles());
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
}

TEST(SyncBatchNormTest, ConvertKeepsParametersBuffersAndNames) {
  absl::Status status = RunThreadsWorld(1, [&](ProcessGroup& group) {
    nn::Sequential model;
    model.Append(std::make_shared<nn::BatchNorm2d>(2));
    model.Append(std::make_shared<nn::ReLU>());
    model.Append(std::make_shared<nn::BatchNorm2d>(2));
    const NamedTensors before = model.NamedParameters(), buffers = model.NamedBuffers();
    EXPECT_EQ(ConvertSyncBatchNorm(model, group), 2);
    const NamedTensors after = model.NamedParameters(), buffers_after = model.NamedBuffers();
    EXPECT_EQ(before.size(), after.size());
    for (size_t i = 0; i < std::min(before.size(), after.size()); ++i) {
      EXPECT_EQ(before[i].first, after[i].first);
      EXPECT_EQ(before[i].second.impl(), after[i].second.impl()) << "the same tensor";
    }
    EXPECT_EQ(buffers.size(), buffers_after.size());
    for (size_t i = 0; i < std::min(buffers.size(), buffers_after.size()); ++i) {
      EXPECT_EQ(buffers[i].first, buffers_after[i].first);
    }
    EXPECT_NE(model.DebugString().find("SyncBatchNorm(2, eps=1e-05"), std::string::npos)
        << model.DebugString();
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace ddpkit::comm
