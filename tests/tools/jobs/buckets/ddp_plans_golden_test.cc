// DDP's bucket plans against PyTorch 1.13's own (tests/testdata/ddp_plans.json, written by
// tools/scripts/golden/make_ddp_plan_golden.py): for each model, pair of caps and mode, the
// initial bucket sizes, the gradient-ready order and the rebuilt plan that PyTorch's DDP logged,
// against what ddpkit's Reducer did in real iterations (ModelBucketPlans, behind
// `ddpkit buckets --model`).
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tools/jobs/buckets/buckets.h"

namespace ddpkit::jobs {
namespace {

using ::testing::HasSubstr;

nlohmann::json LoadGolden() {
  std::ifstream in(std::string(DDPKIT_TESTDATA_DIR) + "/ddp_plans.json");
  return nlohmann::json::parse(in);
}

std::vector<int64_t> Sizes(const google::protobuf::RepeatedPtrField<reducer::BucketInfo>& b) {
  std::vector<int64_t> sizes;
  for (const reducer::BucketInfo& info : b) sizes.push_back(info.bytes());
  return sizes;
}

std::vector<std::vector<int>> Indices(
    const google::protobuf::RepeatedPtrField<reducer::BucketInfo>& buckets) {
  std::vector<std::vector<int>> out;
  for (const reducer::BucketInfo& info : buckets) {
    out.emplace_back(info.param_indices().begin(), info.param_indices().end());
  }
  return out;
}

reducer::DdpOptions OptionsOf(const nlohmann::json& c) {
  const std::string mode = c["mode"];
  // Bytes / 2^20 is exact in a double, so ddpkit's MiB -> bytes gives the same integers back.
  return {.bucket_cap_mb = c["bucket_cap_bytes"].get<double>() / (1 << 20),
          .first_bucket_mb = c["first_bucket_bytes"].get<double>() / (1 << 20),
          .find_unused_parameters = mode == "find_unused",
          .static_graph = mode == "static_graph"};
}

TEST(DdpPlansGoldenTest, EveryPlanIsPyTorchs) {
  const nlohmann::json golden = LoadGolden();
  ASSERT_GE(golden["cases"].size(), 100u);
  for (const nlohmann::json& c : golden["cases"]) {
    const std::string name = c["model"].get<std::string>() + " first " +
                             c["first_bucket_bytes"].dump() + " cap " +
                             c["bucket_cap_bytes"].dump() + " " + c["mode"].get<std::string>();
    SCOPED_TRACE(name);
    absl::StatusOr<ModelBuckets> plans = ModelBucketPlans(c["model"], OptionsOf(c));
    if (c.contains("error")) {
      // PyTorch refused the unused layer without find_unused_parameters at the second forward
      // ("Expected to have finished reduction in the prior iteration ..."); so does ddpkit,
      // whose plans come from exactly two iterations here, naming the parameters.
      ASSERT_EQ(c["error_iteration"].get<int>(), 2);
      ASSERT_FALSE(plans.ok());
      EXPECT_THAT(plans.status().message(),
                  HasSubstr("the previous iteration's gradient reduction never finished"));
      EXPECT_THAT(plans.status().message(), HasSubstr("unused.weight"));
      continue;
    }
    ASSERT_TRUE(plans.ok()) << plans.status();
    EXPECT_EQ(plans->bucket_cap_bytes(), c["bucket_cap_bytes_logged"].get<int64_t>());
    EXPECT_EQ(Sizes(plans->initial_buckets()), c["bucket_sizes"].get<std::vector<int64_t>>());
    EXPECT_EQ(std::vector<int>(plans->grad_ready_order().begin(), plans->grad_ready_order().end()),
              c["grad_ready_order"].get<std::vector<int>>());
    if (!c["has_rebuilt_buckets"].get<bool>()) {
      EXPECT_EQ(plans->rebuilt_buckets_size(), 0);
      continue;
    }
    EXPECT_EQ(Indices(plans->rebuilt_buckets()),
              c["rebuilt_buckets"].get<std::vector<std::vector<int>>>());
    EXPECT_EQ(Sizes(plans->rebuilt_buckets()),
              c["rebuilt_bucket_sizes"].get<std::vector<int64_t>>());
  }
}

// The example, spelled out: PyTorch's Linear is addmm(bias, x, weight.t()), so each
// layer's bias is ready before its weight.
TEST(DdpPlansGoldenTest, EachLayersBiasIsReadyBeforeItsWeight) {
  absl::StatusOr<ModelBuckets> plans = ModelBucketPlans(
      "mlp:8,16,16,4", {.bucket_cap_mb = 419.0 / (1 << 20), .first_bucket_mb = 300.0 / (1 << 20)});
  ASSERT_TRUE(plans.ok()) << plans.status();
  EXPECT_EQ(std::vector<int>(plans->grad_ready_order().begin(), plans->grad_ready_order().end()),
            (std::vector<int>{5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(Indices(plans->rebuilt_buckets()),
            (std::vector<std::vector<int>>{{5, 4, 3}, {2}, {1, 0}}));
  EXPECT_EQ(Sizes(plans->rebuilt_buckets()), (std::vector<int64_t>{336, 1024, 576}));
}

}  // namespace
}  // namespace ddpkit::jobs
