// SampleSort and ExchangeRows on the threads world: the property checks shared with the Gloo
// worker (tests/comm/collective_checks.h) over worlds of 1 to 4 ranks, then the errors.
#include "comm/ops/sample_sort.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "comm/threads/threads_world.h"
#include "gtest/gtest.h"
#include "tests/comm/collective_checks.h"

namespace ddpkit::comm {
namespace {

using testing_util::SampleSortCase;
using Row = std::vector<int64_t>;

std::vector<Row> RowsOf(const Tensor& rows) {
  std::vector<Row> out;
  const int64_t w = rows.size(1);
  for (int64_t i = 0; i < rows.size(0); ++i) {
    out.emplace_back(rows.data<int64_t>() + i * w, rows.data<int64_t>() + (i + 1) * w);
  }
  return out;
}

struct WorldCase {
  int world;
  SampleSortCase c;
  friend void PrintTo(const WorldCase& w, std::ostream* os) {
    *os << w.c.name << ", world " << w.world;
  }
};

std::vector<WorldCase> WorldCases() {
  std::vector<WorldCase> cases;
  for (int world : {1, 2, 3, 4}) {
    for (const SampleSortCase& c : testing_util::SampleSortCases(world))
      cases.push_back({world, c});
  }
  return cases;
}

class SampleSortPropertiesTest : public testing::TestWithParam<WorldCase> {};

// Every rank checks its own shard against the global order (CheckSampleSort); here, with every
// shard in hand, the order across shards and the multiset are checked once more directly.
TEST_P(SampleSortPropertiesTest, HoldOnEveryRank) {
  const auto& [world, c] = GetParam();
  std::vector<SortedShard> shards(world);
  absl::Status status = RunThreadsWorld(world, [&](ProcessGroup& group) -> absl::Status {
    DDPKIT_ASSIGN_OR_RETURN(shards[group.rank()], testing_util::CheckSampleSort(group, c));
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;

  std::vector<Row> gathered, inputs;
  for (int r = 0; r < world; ++r) {
    const std::vector<Row> shard = RowsOf(shards[r].rows);
    if (!shard.empty() && !gathered.empty()) {
      EXPECT_LE(gathered.back(), shard.front()) << "the last row before rank " << r << "'s shard";
    }
    gathered.insert(gathered.end(), shard.begin(), shard.end());
    const std::vector<Row> input = RowsOf(testing_util::SampleSortInput(c, r));
    inputs.insert(inputs.end(), input.begin(), input.end());
  }
  EXPECT_TRUE(std::is_sorted(gathered.begin(), gathered.end()));
  std::sort(inputs.begin(), inputs.end());
  EXPECT_EQ(gathered, inputs);
}

INSTANTIATE_TEST_SUITE_P(Worlds, SampleSortPropertiesTest, testing::ValuesIn(WorldCases()),
                         [](const testing::TestParamInfo<WorldCase>& info) {
                           return StrCat("world", info.param.world, "_", info.param.c.name);
                         });

// With all-equal rows only the (rank, position) tie-break spreads the rows: without it every
// row would land on one rank.
TEST(SampleSortTest, AllEqualRowsSpreadNearlyEvenly) {
  std::vector<int64_t> sizes;
  ASSERT_TRUE(RunThreadsWorld(4, [&](ProcessGroup& group) -> absl::Status {
                DDPKIT_ASSIGN_OR_RETURN(
                    SortedShard shard,
                    SampleSort(group, Tensor::Full({1000, 1}, 7.0, DType::kInt64)));
                if (group.rank() == 0) sizes = shard.shard_sizes;
                return absl::OkStatus();
              }).ok());
  // 4000 rows, blocks of ceil(1000 / 64) = 16 rows: each shard within one block of 1000.
  ASSERT_EQ(sizes.size(), 4u);
  for (int64_t m : sizes) EXPECT_NEAR(m, 1000, 16);
}

TEST(SampleSortShardBoundTest, IsTheDocumentedFormula) {
  // b = ceil(10 / 4) = 3, 0, ceil(7 / 4) = 2; ceil(17 / 3) = 6: 6 + 3 + 5.
  EXPECT_EQ(SampleSortShardBound({10, 0, 7}, 4), 14);
  // s over n: one row per block; b = 1, 1: ceil(5 / 2) + 1 + 2.
  EXPECT_EQ(SampleSortShardBound({3, 2}, 64), 6);
  EXPECT_EQ(SampleSortShardBound({0, 0, 0}, 8), 0);
  EXPECT_EQ(SampleSortShardBound({100}, 1), 100 + 100 + 100);
  EXPECT_THROW(SampleSortShardBound({}, 4), Error);
  EXPECT_THROW(SampleSortShardBound({4}, 0), Error);
}

TEST(SampleSortTest, AWidthMismatchFailsEveryRankAlike) {
  for (int world : {2, 3}) {
    EXPECT_TRUE(RunThreadsWorld(world, testing_util::CheckSampleSortRejectsMismatchedWidths).ok());
  }
  std::vector<absl::Status> seen(3);
  (void)RunThreadsWorld(3, [&](ProcessGroup& group) {
    seen[group.rank()] =
        SampleSort(group, Tensor::Zeros({2, group.rank() == 2 ? 1 : 2}, DType::kInt64)).status();
    return absl::OkStatus();
  });
  for (const absl::Status& s : seen) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(),
              "sample sort: the ranks' rows differ in width (rank 0: w = 2, rank 1: w = 2, rank 2: "
              "w = 1); every rank must pass int64 [n, w] rows with the same w, the same columns in "
              "the same order");
  }
}

// A rank's own bad input: it gets the reason, its peers an error naming it — at once, not at
// the timeout.
TEST(SampleSortTest, BadInputOnOneRankFailsEveryRank) {
  ProcessGroupOptions options;
  options.timeout = absl::Seconds(30);
  const absl::Time start = absl::Now();
  std::vector<absl::Status> seen(3);
  (void)RunThreadsWorld(
      3,
      [&](ProcessGroup& group) {
        const Tensor rows =
            group.rank() == 1 ? Tensor::Zeros({4, 2}) : Tensor::Zeros({4, 2}, DType::kInt64);
        seen[group.rank()] = SampleSort(group, rows).status();
        return absl::OkStatus();
      },
      options);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(seen[1].message(),
            "sample sort: rows must be an int64 [n, w] tensor on the host with w >= 1 (column 0 "
            "the key), got float32[4, 2] on cpu");
  for (int r : {0, 2}) {
    EXPECT_EQ(seen[r].code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(seen[r].message(),
              "sample sort: rank(s) 1 passed invalid input (the error on that rank says why); no "
              "rank exchanged any rows");
  }
}

TEST(SampleSortTest, RejectsBadRowsAndOptions) {
  auto sort = [](const Tensor& rows, int64_t samples = 64) {
    absl::Status status;
    EXPECT_TRUE(RunThreadsWorld(1, [&](ProcessGroup& group) {
                  status = SampleSort(group, rows, {.samples_per_rank = samples}).status();
                  return absl::OkStatus();
                }).ok());
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    return std::string(status.message());
  };
  EXPECT_TRUE(absl::StrContains(sort(Tensor()), "got an undefined tensor"));
  EXPECT_TRUE(absl::StrContains(sort(Tensor::Zeros({4}, DType::kInt64)), "got int64[4] on cpu"));
  EXPECT_TRUE(
      absl::StrContains(sort(Tensor::Zeros({4, 0}, DType::kInt64)), "got int64[4, 0] on cpu"));
  EXPECT_EQ(sort(Tensor::Zeros({4, 1}, DType::kInt64), 0),
            "sample sort: samples_per_rank must be at least 1, got 0");
}

// The first collective fails (rank 1 never joins): the comm layer's diagnosis, with the step.
TEST(SampleSortTest, ACommFailureNamesTheStep) {
  absl::Status seen;
  (void)RunThreadsWorld(2, [&](ProcessGroup& group) {
    if (group.rank() == 1) return absl::OkStatus();  // departs without sorting
    seen = SampleSort(group, Tensor::Zeros({4, 1}, DType::kInt64)).status();
    return seen;
  });
  EXPECT_FALSE(seen.ok());
  EXPECT_TRUE(absl::StartsWith(seen.message(),
                               "sample sort: sharing the row counts and widths failed: ALLGATHER"))
      << seen;
}

TEST(ExchangeRowsTest, DeliversInRankThenSendOrder) {
  for (int world : {1, 2, 3, 4}) {
    absl::Status status = RunThreadsWorld(world, testing_util::CheckExchangeRows);
    EXPECT_TRUE(status.ok()) << "world " << world << ": " << status;
  }
}

TEST(ExchangeRowsTest, BadDestinationsFailEveryRank) {
  for (const std::vector<int>& destination : {std::vector<int>{0, 2}, std::vector<int>{0}}) {
    std::vector<absl::Status> seen(2);
    (void)RunThreadsWorld(2, [&](ProcessGroup& group) {
      const std::vector<int> to = group.rank() == 0 ? destination : std::vector<int>{1, 0};
      seen[group.rank()] = ExchangeRows(group, Tensor::Zeros({2, 3}, DType::kInt64), to).status();
      return absl::OkStatus();
    });
    EXPECT_EQ(seen[0].message(), destination.size() == 1
                                     ? "exchange rows: got 2 rows but 1 destination(s); give every "
                                       "row one destination rank"
                                     : "exchange rows: destination[1] is 2, not a rank in [0, 2)");
    EXPECT_EQ(seen[1].code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(seen[1].message(), "rank(s) 0 passed invalid input")) << seen[1];
  }
}

}  // namespace
}  // namespace ddpkit::comm
