// The whole recipe on a threads world: the distributed sort and deal, the layouts' costs, the
// LR schedule, Join with uneven (and empty) ranks, and the averaging check.
#include <unistd.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "autograd/nn/safetensors.h"
#include "gtest/gtest.h"
#include "tools/jobs/varlen/varlen.h"

namespace ddpkit::jobs {
namespace {

VarlenConfig SmallConfig(int world) {
  VarlenConfig config;
  config.world.world_size = world;
  config.model = "seq:64,8,16,4";
  config.synthetic.samples = 600;
  config.synthetic.min_length = 2;
  config.synthetic.max_length = 64;
  config.max_tokens = 256;
  config.batch_size = 8;
  config.world.options.timeout = absl::Seconds(20);
  config.epochs = 2;
  return config;
}

const LayoutReport& Layout(const VarlenReport& report, std::string_view name, bool budget) {
  for (const LayoutReport& l : report.layouts()) {
    if (l.name() == name && absl::StartsWith(l.batching(), "max") == budget) return l;
  }
  ADD_FAILURE() << "no layout " << name;
  return report.layouts(0);
}

TEST(VarlenJobTest, TheRecipeBalancesRanksAndSampleWeightingIsExact) {
  absl::StatusOr<VarlenReport> report = RunVarlen(SmallConfig(3));
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->layouts_size(), 6);
  const LayoutReport& trained = Layout(*report, "sorted globally", true);
  EXPECT_TRUE(trained.trained());
  for (bool budget : {false, true}) {
    const LayoutReport& before = Layout(*report, "sorted per rank", budget);
    const LayoutReport& after = Layout(*report, "sorted globally", budget);
    EXPECT_LT(after.sync_cost(), before.sync_cost()) << before.batching();
    EXPECT_LT(after.mean_imbalance(), before.mean_imbalance()) << before.batching();
    EXPECT_EQ(after.tokens(), report->tokens());
  }
  // Token budgets pack short samples many to a batch: far less padding than shuffled batches.
  EXPECT_LT(trained.padding_waste(), Layout(*report, "shuffled", true).padding_waste());
  EXPECT_EQ(report->steps_size(), 2 * trained.steps());
  int64_t samples = 0;
  for (int t = 0; t < trained.steps(); ++t) samples += report->steps(t).global_batch();
  EXPECT_EQ(samples, 600);
  EXPECT_EQ(report->ref_batch_size(), 600 / trained.steps());  // the mean global batch
  for (const StepReport& s : report->steps()) {
    EXPECT_EQ(s.global_batch(), report->steps(s.step() % trained.steps()).global_batch());
    EXPECT_DOUBLE_EQ(s.lr(), 1.0 * static_cast<double>(s.global_batch()) /
                                 static_cast<double>(report->ref_batch_size()));
    EXPECT_TRUE(std::isfinite(s.loss()));
    EXPECT_LE(s.longest() * *std::max_element(s.batch_sizes().begin(), s.batch_sizes().end()), 256);
  }
  // The curriculum: the batch size falls as the samples get longer.
  EXPECT_GT(report->steps(0).global_batch(), report->steps(trained.steps() - 1).global_batch());
  const WeightingCheck& check = report->weighting_check();
  ASSERT_GE(check.step(), 0);
  EXPECT_LT(check.sample_error(), 1e-5);
  EXPECT_GT(check.rank_error(), 100 * check.sample_error());
  EXPECT_TRUE(report->models_identical());
  EXPECT_EQ(report->sort().shard_sizes_size(), 3);
  EXPECT_LE(
      *std::max_element(report->sort().shard_sizes().begin(), report->sort().shard_sizes().end()),
      report->sort().shard_bound());
}

// Reads the shards dumped under `prefix` and checks they are the global (length, id) order
// dealt round-robin, reversed for a descending order.
void ExpectDealtRoundRobin(const std::string& prefix, int world, bool descending) {
  std::vector<std::vector<std::pair<int64_t, int64_t>>> shards(world);
  std::vector<std::pair<int64_t, int64_t>> all;
  for (int r = 0; r < world; ++r) {
    absl::StatusOr<SafetensorsFile> file =
        ReadSafetensors(StrCat(prefix, ".rank", r, ".safetensors"));
    ASSERT_TRUE(file.ok()) << file.status();
    const Tensor* ids = file->Find("ids");
    const Tensor* lengths = file->Find("lengths");
    ASSERT_TRUE(ids != nullptr && lengths != nullptr);
    for (int64_t i = 0; i < ids->numel(); ++i) {
      shards[r].emplace_back(lengths->data<int64_t>()[i], ids->data<int64_t>()[i]);
    }
    all.insert(all.end(), shards[r].begin(), shards[r].end());
  }
  std::sort(all.begin(), all.end());
  if (descending) std::reverse(all.begin(), all.end());
  for (size_t q = 0; q < all.size(); ++q) {
    ASSERT_EQ(shards[q % world][q / world], all[q]) << "training position " << q;
  }
  std::vector<int64_t> ids;
  for (const auto& [length, id] : all) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (size_t i = 0; i < ids.size(); ++i) ASSERT_EQ(ids[i], static_cast<int64_t>(i));
}

TEST(VarlenJobTest, EachRankTrainsOnTheGlobalOrderDealtRoundRobin) {
  for (bool descending : {false, true}) {
    const std::string prefix =
        StrCat(testing::TempDir(), "/varlen_shards_", ::getpid(), descending ? "_desc" : "_asc");
    VarlenConfig config = SmallConfig(4);
    config.synthetic.samples = 203;  // not a multiple of the world: ranks hold 51 or 50
    config.curriculum.order =
        descending ? CurriculumOrder::kDescending : CurriculumOrder::kAscending;
    config.dump_shards_prefix = prefix;
    absl::StatusOr<VarlenReport> report = RunVarlen(config);
    ASSERT_TRUE(report.ok()) << report.status();
    ExpectDealtRoundRobin(prefix, 4, descending);
  }
}

TEST(VarlenJobTest, TheRunIsTheSameEveryTime) {
  VarlenConfig config = SmallConfig(3);
  config.curriculum = {.order = CurriculumOrder::kBucketed, .buckets = 4, .seed = 5};
  absl::StatusOr<VarlenReport> first = RunVarlen(config);
  absl::StatusOr<VarlenReport> second = RunVarlen(config);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->SerializeAsString(), second->SerializeAsString());
}

TEST(VarlenJobTest, ARankWithNoBatchesJoinsAtOnce) {
  VarlenConfig config = SmallConfig(3);
  config.synthetic.samples = 2;  // rank 2 gets nothing to train on
  absl::StatusOr<VarlenReport> report = RunVarlen(config);
  ASSERT_TRUE(report.ok()) << report.status();
  const LayoutReport& trained = Layout(*report, "sorted globally", true);
  EXPECT_EQ(trained.batches_per_rank(2), 0);
  EXPECT_EQ(report->sort().input_sizes(2), 0);
  EXPECT_EQ(report->weighting_check().step(), -1);  // no step has a batch on every rank
  EXPECT_TRUE(report->models_identical());
}

TEST(VarlenJobTest, UnevenRanksWithoutJoinFailWithTheDiagnosis) {
  VarlenConfig config = SmallConfig(2);
  config.synthetic.samples = 3;
  config.batch_size = 1;
  config.max_tokens = 0;  // fixed batches of 1: rank 0 has 2, rank 1 has 1
  config.use_join = false;
  absl::StatusOr<VarlenReport> report = RunVarlen(config);
  ASSERT_FALSE(report.ok());
  EXPECT_TRUE(absl::StrContains(report.status().message(), "finished without issuing it"))
      << report.status();
}

TEST(VarlenJobTest, BadInputIsRefusedBeforeAnyRankStarts) {
  VarlenConfig config = SmallConfig(2);
  config.max_tokens = 10;  // shorter than the longest sample
  EXPECT_TRUE(absl::StrContains(RunVarlen(config).status().message(), "raise --max-tokens"));
  config = SmallConfig(2);
  config.model = "mlp:4,4";
  EXPECT_EQ(RunVarlen(config).status().code(), absl::StatusCode::kInvalidArgument);
  config = SmallConfig(2);
  config.synthetic.max_length = 1;
  EXPECT_TRUE(absl::StrContains(RunVarlen(config).status().message(), "--max-length"));
  config = SmallConfig(2);
  config.data_path = "/nonexistent/varlen.safetensors";
  EXPECT_TRUE(absl::StrContains(RunVarlen(config).status().message(), "/nonexistent/varlen"));
}

}  // namespace
}  // namespace ddpkit::jobs
