// Bucket assignment against PyTorch's own test vectors (test_c10d_common.py's
// ComputeBucketAssignmentTest, and DDP's logging-data test) plus the rebuild and sparse paths.
#include "reducer/bucket_assignment.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reducer/distributed_data_parallel.h"

namespace ddpkit::reducer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Buckets = std::vector<std::vector<size_t>>;
using Limits = std::vector<size_t>;

constexpr DType f32 = DType::kFloat32, f64 = DType::kFloat64;

BucketAssignment Assign(const std::vector<BucketTensorSpec>& tensors, const Limits& limits,
                        const std::vector<bool>& sparse = {},
                        const std::vector<size_t>& order = {}) {
  absl::StatusOr<BucketAssignment> result =
      ComputeBucketAssignmentBySize(tensors, limits, sparse, order);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *result : BucketAssignment{};
}

TEST(BucketAssignmentTest, SingleLimitSingleDtype) {  // vector A
  BucketAssignment a = Assign({{100, f32}, {200, f32}, {100, f32}, {50, f32}}, {400});
  EXPECT_EQ(a.buckets, (Buckets{{0}, {1}, {2}, {3}}));
  EXPECT_EQ(a.limits, (Limits{400, 400, 400, 400}));
}

TEST(BucketAssignmentTest, SingleLimitMultiDtype) {  // vector B
  BucketAssignment a =
      Assign({{50, f32}, {25, f64}, {50, f32}, {25, f64}, {50, f32}, {25, f64}}, {400});
  EXPECT_EQ(a.buckets, (Buckets{{0, 2}, {1, 3}, {4}, {5}}));
  EXPECT_EQ(a.limits, (Limits{400, 400, 400, 400}));
}

TEST(BucketAssignmentTest, MultiLimitSingleDtype) {  // vector C
  BucketAssignment a = Assign({{10, f32}, {10, f32}, {10, f32}, {10, f32}}, {40, 80});
  EXPECT_EQ(a.buckets, (Buckets{{0}, {1, 2}, {3}}));
  EXPECT_EQ(a.limits, (Limits{40, 80, 80}));
}

TEST(BucketAssignmentTest, MultiLimitMultiDtype) {  // vector D
  BucketAssignment a =
      Assign({{50, f32}, {25, f64}, {50, f32}, {25, f64}, {50, f32}, {25, f64}}, {200, 400});
  EXPECT_EQ(a.buckets, (Buckets{{0}, {1}, {2, 4}, {3, 5}}));
  EXPECT_EQ(a.limits, (Limits{200, 200, 400, 400}));
}

TEST(BucketAssignmentTest, ArrivalOrderIsKeptNotSorted) {  // vector G (the rebuild path)
  BucketAssignment a =
      Assign({{10, f32}, {10, f32}, {10, f32}, {10, f32}}, {40, 80}, {}, {3, 2, 1, 0});
  EXPECT_EQ(a.buckets, (Buckets{{3}, {2, 1}, {0}}));
  EXPECT_EQ(a.limits, (Limits{40, 80, 80}));
}

TEST(BucketAssignmentTest, SparseGradientsAreSingletonsWithoutLimit) {  // vector H
  BucketAssignment a = Assign({{100, f32}, {100, f32}, {100, f32}}, {400}, {false, true, false});
  EXPECT_EQ(a.buckets, (Buckets{{0}, {1}, {2}}));
  EXPECT_EQ(a.limits, (Limits{400, 0, 400}));
}

TEST(BucketAssignmentTest, BucketClosesWhenReachingTheLimitExactly) {
  // 40 B + 40 B reaches 80 (>=) and closes; a tensor larger than the limit is alone.
  BucketAssignment a = Assign({{10, f32}, {10, f32}, {100, f32}, {1, f32}}, {80});
  EXPECT_EQ(a.buckets, (Buckets{{0, 1}, {2}, {3}}));
}

TEST(BucketAssignmentTest, LeftoversKeepFirstAppearanceOrderInTheRebuild) {
  BucketAssignment a = Assign({{1, f32}, {1, f64}, {1, f32}}, {1000}, {}, {1, 0, 2});
  EXPECT_EQ(a.buckets, (Buckets{{1}, {0, 2}}));
}

TEST(BucketAssignmentTest, RejectsMalformedArguments) {
  auto error = [](const std::vector<BucketTensorSpec>& t, const Limits& l,
                  const std::vector<bool>& s = {}, const std::vector<size_t>& o = {}) {
    absl::StatusOr<BucketAssignment> r = ComputeBucketAssignmentBySize(t, l, s, o);
    EXPECT_FALSE(r.ok());
    return std::string(r.status().message());
  };
  EXPECT_THAT(error({}, {10}), HasSubstr("at least one parameter"));
  EXPECT_THAT(error({{1, f32}}, {}), HasSubstr("at least one size limit"));
  EXPECT_THAT(error({{1, f32}}, {0}), HasSubstr("must be positive"));
  EXPECT_THAT(error({{1, f32}, {1, f32}}, {10}, {true}), HasSubstr("one per parameter"));
  EXPECT_THAT(error({{1, f32}, {1, f32}}, {10}, {}, {0}),
              HasSubstr("every parameter exactly once"));
  EXPECT_THAT(error({{1, f32}, {1, f32}}, {10}, {}, {0, 0}), HasSubstr("parameter 0 twice"));
  EXPECT_THAT(error({{1, f32}, {1, f32}}, {10}, {}, {0, 5}), HasSubstr("names parameter 5"));
}

// PyTorch's test_ddp_logging_data_cpu, LargeNet: a float64 and a float32 weight with
// bucket_cap_mb=1.5 and find_unused off give one bucket per dtype, reversed: [fc2], [fc1].
TEST(InitialBucketAssignmentTest, OneBucketPerDtypeReversedWithoutFindUnused) {
  BucketAssignment a =
      InitialBucketAssignment({{2000000, f64}, {1000000, f32}}, {.bucket_cap_mb = 1.5});
  EXPECT_EQ(a.buckets, (Buckets{{1}, {0}}));
  EXPECT_EQ(MegabytesToBytes(1.5), 1572864u);
}

TEST(InitialBucketAssignmentTest, FindUnusedUsesFirstBucketAndCapThenReverses) {
  // 3 x 400 KiB float32: the 1 MiB first limit closes after three tensors... and the rest.
  const int64_t n = 100 * 1024;  // 400 KiB each
  BucketAssignment a = InitialBucketAssignment({{n, f32}, {n, f32}, {n, f32}, {n, f32}},
                                               {.find_unused_parameters = true});
  EXPECT_EQ(a.buckets, (Buckets{{3}, {0, 1, 2}}));
  EXPECT_EQ(a.limits, (Limits{kDefaultBucketBytesCap, kDefaultFirstBucketBytes}));
}

TEST(RebuiltBucketAssignmentTest, SmallFirstBucketInArrivalOrder) {
  const int64_t n = 100 * 1024;
  BucketAssignment a =
      RebuiltBucketAssignment({{n, f32}, {n, f32}, {n, f32}, {n, f32}}, {3, 2, 1, 0}, {});
  EXPECT_EQ(a.buckets, (Buckets{{3, 2, 1}, {0}}));
  EXPECT_THAT(a.limits, ElementsAre(kDefaultFirstBucketBytes, kDefaultBucketBytesCap));
}

}  // namespace
}  // namespace ddpkit::reducer
