// The pure pieces of the varlen recipe: the sampler share, the curriculum deal, batching and
// its cost, LR scaling and the loss weights.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "gtest/gtest.h"
#include "tools/jobs/varlen/batching.h"
#include "tools/jobs/varlen/curriculum.h"
#include "tools/jobs/varlen/lr_scaling.h"
#include "tools/jobs/varlen/weighting.h"

namespace ddpkit::jobs {
namespace {

TEST(ShuffledShareTest, SharesPartitionTheIdsAndDependOnTheSeed) {
  std::vector<int64_t> all;
  for (int r = 0; r < 3; ++r) {
    const std::vector<int64_t> share = ShuffledShare(10, 3, r, 7);
    EXPECT_EQ(share.size(), r == 0 ? 4u : 3u);  // positions r, r + 3, ... of 10
    all.insert(all.end(), share.begin(), share.end());
  }
  std::sort(all.begin(), all.end());
  std::vector<int64_t> ids(10);
  std::iota(ids.begin(), ids.end(), 0);
  EXPECT_EQ(all, ids);
  EXPECT_EQ(ShuffledShare(10, 3, 1, 7), ShuffledShare(10, 3, 1, 7));
  EXPECT_NE(ShuffledShare(10, 3, 1, 7), ShuffledShare(10, 3, 1, 8));
}

// The training positions of every sorted position, each once.
std::vector<int64_t> Positions(const Curriculum& c, int64_t n) {
  std::vector<int64_t> q;
  for (int64_t g = 0; g < n; ++g) q.push_back(c.TrainingPosition(g));
  return q;
}

bool IsPermutation(std::vector<int64_t> q) {
  std::sort(q.begin(), q.end());
  for (size_t i = 0; i < q.size(); ++i) {
    if (q[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

TEST(CurriculumTest, AscendingDealsTheSortedOrderRoundRobin) {
  const Curriculum c(10, 4, {.order = CurriculumOrder::kAscending});
  EXPECT_EQ(Positions(c, 10), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(c.RankOf(0), 0);
  EXPECT_EQ(c.RankOf(5), 1);  // the 6th shortest sample is rank 1's second
  EXPECT_EQ(c.RankOf(9), 1);
}

TEST(CurriculumTest, DescendingPutsTheLongestFirst) {
  const Curriculum c(5, 2, {.order = CurriculumOrder::kDescending});
  EXPECT_EQ(Positions(c, 5), (std::vector<int64_t>{4, 3, 2, 1, 0}));
}

TEST(CurriculumTest, BucketedKeepsBucketsWholeAndRanksAligned) {
  const int world = 4;
  const int64_t n = 100;
  const Curriculum c(n, world, {.order = CurriculumOrder::kBucketed, .buckets = 5, .seed = 3});
  const std::vector<int64_t> q = Positions(c, n);
  EXPECT_TRUE(IsPermutation(q));
  // Buckets of 20 sorted positions (a multiple of the world) stay contiguous and in order...
  for (int64_t b = 0; b < 5; ++b) {
    for (int64_t i = 1; i < 20; ++i) EXPECT_EQ(q[b * 20 + i], q[b * 20] + i);
    // ...each starting on a multiple of the world, so every rank's k-th sample comes from the
    // same bucket.
    EXPECT_EQ(q[b * 20] % world, 0);
  }
  EXPECT_NE(q, Positions(Curriculum(n, world, {.order = CurriculumOrder::kAscending}), n))
      << "the seeded order should not be the sorted one";
  EXPECT_EQ(q, Positions(Curriculum(n, world,
                                    {.order = CurriculumOrder::kBucketed, .buckets = 5, .seed = 3}),
                         n));
}

TEST(CurriculumTest, BucketedWithAPartialBucketIsAPermutation) {
  for (int64_t n : {1, 7, 33, 101}) {
    const Curriculum c(n, 3, {.order = CurriculumOrder::kBucketed, .buckets = 4, .seed = 1});
    EXPECT_TRUE(IsPermutation(Positions(c, n))) << n;
  }
}

TEST(CurriculumTest, ParseNames) {
  EXPECT_EQ(*ParseCurriculumOrder("bucketed"), CurriculumOrder::kBucketed);
  EXPECT_EQ(ParseCurriculumOrder("sorted").status().message(),
            "--curriculum must be ascending, descending or bucketed, got 'sorted'");
}

TEST(BatchingTest, FixedSizeBatchesCountPadding) {
  const std::vector<int64_t> lengths = {3, 5, 2, 7, 1};
  const std::vector<Batch> b = FixedSizeBatches(lengths, 2);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].count(), 2);
  EXPECT_EQ(b[0].longest, 5);
  EXPECT_EQ(b[0].tokens, 8);
  EXPECT_EQ(b[0].padded(), 10);
  EXPECT_EQ(b[1].padded(), 14);
  EXPECT_EQ(b[2].begin, 4);
  EXPECT_EQ(b[2].padded(), 1);
}

TEST(BatchingTest, TokenBudgetPacksGreedilyWithinTheBudget) {
  // Budget 12: [2,2,3,3] costs 4 x 3 = 12; adding 4 would cost 5 x 4 = 20.
  const std::vector<int64_t> lengths = {2, 2, 3, 3, 4, 4, 4, 12, 1};
  const std::vector<int64_t> ids = {10, 11, 12, 13, 14, 15, 16, 17, 18};
  const std::vector<Batch> b = *TokenBudgetBatches(lengths, ids, 12);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0].count(), 4);
  EXPECT_EQ(b[0].padded(), 12);
  EXPECT_EQ(b[1].count(), 3);  // 4, 4, 4
  EXPECT_EQ(b[2].count(), 1);  // 12 alone fills the budget
  EXPECT_EQ(b[3].count(), 1);
  for (const Batch& batch : b) EXPECT_LE(batch.padded(), 12);
  int64_t covered = 0;
  for (const Batch& batch : b) {
    EXPECT_EQ(batch.begin, covered);
    covered = batch.end;
  }
  EXPECT_EQ(covered, 9);
}

TEST(BatchingTest, TokenBudgetRefusesASampleLongerThanTheBudget) {
  const std::vector<int64_t> lengths = {2, 20};
  const std::vector<int64_t> ids = {4, 9};
  absl::StatusOr<std::vector<Batch>> b = TokenBudgetBatches(lengths, ids, 16);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("sample 9's length 20"), std::string::npos) << b.status();
}

TEST(BatchingTest, CostOfUnevenRanks) {
  // Rank 0: batches of 6 and 4 padded tokens; rank 1: one of 2.
  const std::vector<std::vector<Batch>> batches = {
      {{.begin = 0, .end = 2, .longest = 3, .tokens = 5},
       {.begin = 2, .end = 3, .longest = 4, .tokens = 4}},
      {{.begin = 0, .end = 1, .longest = 2, .tokens = 2}}};
  const LayoutCost cost = CostOf(batches);
  EXPECT_EQ(cost.steps, 2);
  EXPECT_EQ(cost.batches_per_rank, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(cost.padded, (std::vector<std::vector<int64_t>>{{6, 2}, {4, 0}}));
  EXPECT_DOUBLE_EQ(cost.imbalance[0], 6.0 / 4.0);
  EXPECT_DOUBLE_EQ(cost.imbalance[1], 2.0);  // rank 1 idles
  EXPECT_DOUBLE_EQ(cost.worst_imbalance, 2.0);
  EXPECT_DOUBLE_EQ(cost.mean_imbalance, 1.75);
  EXPECT_DOUBLE_EQ(cost.sync_cost, (6.0 + 4.0) / (12.0 / 2));
  EXPECT_EQ(cost.tokens, 11);
  EXPECT_EQ(cost.padded_total, 12);
  EXPECT_DOUBLE_EQ(cost.padding_waste, 1.0 / 12);
}

TEST(LrScalingTest, LinearAndSquareRoot) {
  EXPECT_DOUBLE_EQ(ScaledLr(0.1, LrScaling::kNone, 256, 64), 0.1);
  EXPECT_DOUBLE_EQ(ScaledLr(0.1, LrScaling::kLinear, 256, 64), 0.4);
  EXPECT_DOUBLE_EQ(ScaledLr(0.1, LrScaling::kSqrt, 256, 64), 0.2);
  EXPECT_DOUBLE_EQ(ScaledLr(0.1, LrScaling::kLinear, 16, 64), 0.025);
  EXPECT_DOUBLE_EQ(ScaledLr(0.1, LrScaling::kSqrt, 16, 64), 0.05);
  EXPECT_DOUBLE_EQ(ScaledLr(0.1, LrScaling::kSqrt, 0, 64), 0);
  EXPECT_EQ(ParseLrScaling("cosine").status().message(),
            "--lr-scaling must be none, linear or sqrt, got 'cosine'");
}

TEST(WeightingTest, LossScales) {
  // Rank weighting: the local mean. Sample weighting: world / global, so DDP's ÷ world leaves
  // the global mean.
  EXPECT_DOUBLE_EQ(LossScale(GradWeighting::kRank, 4, 10, 2), 0.25);
  EXPECT_DOUBLE_EQ(LossScale(GradWeighting::kSample, 4, 10, 2), 0.2);
  EXPECT_EQ(ParseGradWeighting("token").status().message(),
            "--grad-weighting must be rank or sample, got 'token'");
}

TEST(WeightingTest, MostUnevenSharedStepSkipsStepsWithAnIdleRank) {
  EXPECT_EQ(MostUnevenSharedStep({{4, 4}, {2, 6}, {1, 0}}), 1);
  EXPECT_EQ(MostUnevenSharedStep({{4, 4}, {4, 4}}), 0);
  EXPECT_EQ(MostUnevenSharedStep({{0, 3}}), -1);
}

}  // namespace
}  // namespace ddpkit::jobs
