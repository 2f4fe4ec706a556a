// ZeroRedundancyOptimizer (ZeRO-1): PyTorch's partition rule; the same numbers as plain SGD on
// every rank; and, as a second Joinable beside DDP, the same final model as plain SGD under
// Join with uneven inputs — which needs the joined rank to hold the averaged gradient.
#include <mutex>
#include <random>

#include "autograd/nn/optim.h"
#include "gmock/gmock.h"
#include "join/join.h"
#include "reducer/extras/zero_redundancy_optimizer.h"
#include "tests/reducer/ddp_test_util.h"
#include "tests/reducer/test_models.h"

namespace ddpkit::reducer::testing::zero_optimizer_test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ZeroPartitionTest, LargestFirstToTheRankOwningFewestElements) {
  // 30 -> r0, 20 -> r1, 10 -> r1 (20 < 30), 5 -> r0 (tie 30/30: lowest rank).
  EXPECT_THAT(PartitionParameters({10, 30, 20, 5}, 2), ElementsAre(1, 0, 1, 0));
  // Equal sizes keep their order: 0 -> r0, 1 -> r1, 2 -> r2, 3 -> r0.
  EXPECT_THAT(PartitionParameters({4, 4, 4, 4}, 3), ElementsAre(0, 1, 2, 0));
  // More ranks than parameters: some ranks own nothing.
  EXPECT_THAT(PartitionParameters({7, 9}, 4), ElementsAre(1, 0));
  EXPECT_THAT(PartitionParameters({3, 1, 2}, 1), ElementsAre(0, 0, 0));
}

std::vector<double> Flat(const nn::Module& model) {
  std::vector<double> out;
  for (const Tensor& p : model.Parameters()) {
    for (double v : p.ToDoubles()) out.push_back(v);
  }
  return out;
}

const std::vector<int64_t> kWidths = {4, 6, 5, 3};
Tensor Rows(int rank, int step) { return RandomRows(3, 4, 100 * rank + step); }
Tensor Targets(int rank, int step) { return Labels(3, 3, rank + 2 * step); }

// ZeRO-SGD and plain SGD (momentum 0.9) behind DDP take identical steps: each owner updates
// its shard with the same averaged gradient, then broadcasts it.
TEST(ZeroOptimizerTest, MatchesPlainSgdOnEveryRank) {
  for (int world = 1; world <= 4; ++world) {
    SCOPED_TRACE("world " + std::to_string(world));
    std::mutex mu;
    std::vector<std::vector<double>> zero_finals(world), sgd_finals(world);
    std::vector<int64_t> shard_sizes(world);
    for (bool use_zero : {true, false}) {
      RunWorld(world, [&](comm::ProcessGroup& group) {
        auto model = nn::MakeMlp(kWidths, 5, DType::kFloat64);
        auto ddp = MakeDdp(model, group);
        const SgdOptions sgd{.lr = 0.05, .momentum = 0.9};
        std::unique_ptr<Optimizer> optimizer;
        if (use_zero) {
          auto zero =
              ZeroRedundancyOptimizer::Create(model->NamedParameters(), group, MakeSgdFactory(sgd));
          ASSERT_TRUE(zero.ok()) << zero.status();
          std::lock_guard<std::mutex> lock(mu);
          shard_sizes[group.rank()] = (*zero)->shard_elements();
          optimizer = *std::move(zero);
        } else {
          optimizer = std::make_unique<Sgd>(model->Parameters(), sgd);
        }
        for (int step = 0; step < 4; ++step) {
          optimizer->ZeroGrad();
          CrossEntropy(ddp->Forward(Rows(group.rank(), step)), Targets(group.rank(), step))
              .Backward();
          optimizer->Step();
        }
        std::lock_guard<std::mutex> lock(mu);
        (use_zero ? zero_finals : sgd_finals)[group.rank()] = Flat(*model);
      });
    }
    int64_t total = 0;
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(zero_finals[r], sgd_finals[0]) << "rank " << r;
      total += shard_sizes[r];
    }
    EXPECT_EQ(total, 6 * 4 + 6 + 5 * 6 + 5 + 3 * 5 + 3);  // the shards cover the model once
  }
}

TEST(ZeroOptimizerTest, RanksWithDifferentModelsGetTheSameClearError) {
  std::mutex mu;
  std::vector<std::string> errors(2);
  RunWorld(2, [&](comm::ProcessGroup& group) {
    auto model = nn::MakeMlp(
        group.rank() == 0 ? std::vector<int64_t>{4, 6, 3} : std::vector<int64_t>{4, 7, 3}, 1,
        DType::kFloat64);
    auto zero =
        ZeroRedundancyOptimizer::Create(model->NamedParameters(), group, MakeSgdFactory({}));
    ASSERT_FALSE(zero.ok());
    EXPECT_EQ(zero.status().code(), absl::StatusCode::kFailedPrecondition);
    std::lock_guard<std::mutex> lock(mu);
    errors[group.rank()] = std::string(zero.status().message());
  });
  EXPECT_THAT(errors[0], HasSubstr("parameter lists differ"));
  EXPECT_THAT(errors[1], HasSubstr("every rank must build the same model"));
}

struct UnevenCase {
  std::vector<int> inputs{};
  bool find_unused = false;
  double momentum = 0.9;
};

// Under Join, DDP + ZeRO ends with the model that DDP + plain SGD ends with on its last joiner
// (whose model Join's post hook hands to everyone): the ZeRO shards owned by joined ranks keep
// taking the active ranks' steps, momentum included.
void RunUneven(const UnevenCase& c) {
  const int world = static_cast<int>(c.inputs.size());
  std::mutex mu;
  std::vector<std::vector<double>> zero_finals(world), sgd_finals(world);
  for (bool use_zero : {true, false}) {
    RunWorld(world, [&](comm::ProcessGroup& group) {
      const int rank = group.rank();
      // find_unused: branch "a" on even ranks, "b" on odd ones, "never" nowhere.
      std::shared_ptr<nn::Module> model;
      if (c.find_unused) {
        auto branchy = std::make_shared<BranchyNet>(3);
        branchy->use_a = rank % 2 == 0;
        model = branchy;
      } else {
        model = nn::MakeMlp({4, 6, 5, 3}, 3, DType::kFloat64);
      }
      auto ddp = MakeDdp(model, group, {.find_unused_parameters = c.find_unused});
      const SgdOptions sgd{.lr = 0.1, .momentum = c.momentum};
      std::unique_ptr<Optimizer> optimizer;
      std::vector<join::Joinable*> joinables = {ddp.get()};
      if (use_zero) {
        auto zero =
            ZeroRedundancyOptimizer::Create(model->NamedParameters(), group, MakeSgdFactory(sgd));
        ASSERT_TRUE(zero.ok()) << zero.status();
        joinables.push_back(zero->get());
        optimizer = *std::move(zero);
      } else {
        optimizer = std::make_unique<Sgd>(model->Parameters(), sgd);
      }
      join::Join::Run(joinables, {}, [&] {
        for (int t = 0; t < c.inputs[rank]; ++t) {
          optimizer->ZeroGrad();
          CrossEntropy(ddp->Forward(Rows(rank, t)), Targets(rank, t)).Backward();
          optimizer->Step();
        }
      });
      std::lock_guard<std::mutex> lock(mu);
      (use_zero ? zero_finals : sgd_finals)[rank] = Flat(*model);
    });
  }
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(zero_finals[r].size(), sgd_finals[0].size());
    for (size_t i = 0; i < sgd_finals[0].size(); ++i) {
      ASSERT_NEAR(zero_finals[r][i], sgd_finals[0][i], 1e-12) << "rank " << r << ", element " << i;
    }
    EXPECT_EQ(sgd_finals[r], sgd_finals[0])
        << "plain SGD: rank " << r << " after Join's final sync";
  }
}

TEST(ZeroOptimizerTest, UnderJoinEqualsPlainSgdWithUnevenInputs) {
  RunUneven({.inputs = {2, 5}});
  RunUneven({.inputs = {4, 1, 3}});
  RunUneven({.inputs = {0, 3, 3, 1}});
  // Iteration 2: only rank 0 is active, so branch "b" gets no gradient anywhere.
  RunUneven({.inputs = {3, 1, 2, 0}, .find_unused = true});
}

TEST(ZeroOptimizerTest, UnderJoinRandomPatterns) {
  std::mt19937 rng(7);
  for (int world = 2; world <= 4; ++world) {
    for (bool find_unused : {false, true}) {
      UnevenCase c{.inputs = RandomUnevenInputs(rng, world), .find_unused = find_unused};
      SCOPED_TRACE("inputs " + InputsString(c.inputs) + (find_unused ? "find_unused" : ""));
      RunUneven(c);
    }
  }
}

}  // namespace
}  // namespace ddpkit::reducer::testing::zero_optimizer_test
