// The differentiable all-gather: every backward mode against finite differences with unequal
// row counts.
#include "comm/ops/all_gather_with_grad.h"

#include <cmath>
#include <mutex>

#include "autograd/ops.h"
#include "autograd/random.h"
#include "comm/threads/threads_world.h"
#include "gtest/gtest.h"

namespace ddpkit::comm {
namespace {

Tensor Random(int64_t rows, int64_t cols, uint64_t seed) {
  Tensor t = Tensor::Empty({rows, cols}, DType::kFloat64);
  Generator gen(seed);
  gen.FillNormal(t);
  return t;
}

// Rank r's objective on the gathered rows: f_r(G) = Σ tanh(G) ⊙ W_r, a different W_r per rank.
// The sum over ranks F = Σ_r f_r is what the gather's SUM backward differentiates.
double Objective(const std::vector<Tensor>& xs, int world) {
  Tensor all = Concat(xs);
  double total = 0;
  for (int r = 0; r < world; ++r)
    total += Sum(Mul(Tanh(all), Random(all.size(0), all.size(1), 100 + r))).item();
  return total;
}

TEST(AllGatherWithGradTest, EveryBackwardModeAgainstFiniteDifferences) {
  const int world = 3;
  const std::vector<int64_t> rows = {2, 1, 3};  // unequal on purpose
  const int64_t d = 2;
  std::vector<Tensor> xs;
  for (int r = 0; r < world; ++r) xs.push_back(Random(rows[r], d, r));
  // dF/dx_s by central differences in one process.
  std::vector<std::vector<double>> fd(world);
  for (int s = 0; s < world; ++s) {
    for (int64_t i = 0; i < xs[s].numel(); ++i) {
      std::vector<Tensor> plus = xs, minus = xs;
      plus[s] = xs[s].Clone(), minus[s] = xs[s].Clone();
      plus[s].data<double>()[i] += 1e-6;
      minus[s].data<double>()[i] -= 1e-6;
      fd[s].push_back((Objective(plus, world) - Objective(minus, world)) / 2e-6);
    }
  }
  for (GatherBackward mode : kAllGatherBackwards) {
    SCOPED_TRACE(std::string(GatherBackwardName(mode)));
    std::mutex mu;
    std::vector<std::vector<double>> grads(world), own(world);
    std::vector<int64_t> first_rows(world);
    absl::Status status = RunThreadsWorld(world, [&](ProcessGroup& group) {
      const int r = group.rank();
      Tensor x = xs[r].Clone().set_requires_grad(true);
      GatheredRows g = AllGatherWithGrad(x, group, mode);
      Tensor objective = Sum(Mul(Tanh(g.all), Random(g.all.size(0), d, 100 + r)));
      if (mode != GatherBackward::kNone) objective.Backward();
      // What this rank's own objective alone says about its own rows (the slice mode's answer).
      std::vector<Tensor> parts = xs;
      std::vector<double> own_grad;
      for (int64_t i = 0; i < xs[r].numel(); ++i) {
        std::vector<Tensor> plus = xs, minus = xs;
        plus[r] = xs[r].Clone(), minus[r] = xs[r].Clone();
        plus[r].data<double>()[i] += 1e-6;
        minus[r].data<double>()[i] -= 1e-6;
        auto f = [&](const std::vector<Tensor>& v) {
          Tensor all = Concat(v);
          return Sum(Mul(Tanh(all), Random(all.size(0), d, 100 + r))).item();
        };
        own_grad.push_back((f(plus) - f(minus)) / 2e-6);
      }
      std::lock_guard<std::mutex> lock(mu);
      grads[r] = x.grad().defined() ? x.grad().ToDoubles() : std::vector<double>();
      own[r] = own_grad;
      first_rows[r] = g.first_row;
      EXPECT_EQ(g.rows_per_rank, rows);
      return absl::OkStatus();
    });
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_EQ(first_rows, (std::vector<int64_t>{0, 2, 3}));
    for (int s = 0; s < world; ++s) {
      if (mode == GatherBackward::kNone) {
        EXPECT_TRUE(grads[s].empty()) << "a constant gather leaves no gradient";
        continue;
      }
      ASSERT_EQ(grads[s].size(), fd[s].size());
      for (size_t i = 0; i < fd[s].size(); ++i) {
        double expected = fd[s][i];                                // sum, allreduce_slice
        if (mode == GatherBackward::kAvg) expected /= world;       // Horovod's average
        if (mode == GatherBackward::kSlice) expected = own[s][i];  // own objective only
        EXPECT_NEAR(grads[s][i], expected, 1e-6) << "rank " << s << ", element " << i;
      }
    }
  }
}

TEST(AllGatherWithGradTest, RanksWithDifferentFeatureSizesGetAClearError) {
  absl::Status status = RunThreadsWorld(2, [&](ProcessGroup& group) {
    AllGatherWithGrad(Random(2, group.rank() == 0 ? 3 : 4, 0), group);
    return absl::OkStatus();
  });
  ASSERT_FALSE(status.ok());
  EXPECT_NE(std::string(status.message()).find("every rank must gather the same features"),
            std::string::npos)
      << status;
}

}  // namespace
}  // namespace ddpkit::comm
