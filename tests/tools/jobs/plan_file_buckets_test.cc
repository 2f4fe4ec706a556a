// Plan files (tools/scripts/export_ddp_plan.py) and `buckets --params`' plans: on every
// committed plan file, ddpkit's initial and rebuilt plans are the ones PyTorch 1.13's DDP logged
// for the model; a malformed file is an error naming the field, never a crash.
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/jobs/bucket_plans.h"

namespace ddpkit::jobs::plan_file_buckets_test {

using torch_formats::ParsePlanFile;
using torch_formats::PlanFile;
using torch_formats::PlanTensor;
using torch_formats::PyTorchDdpLog;
using torch_formats::ReadPlanFile;

namespace {

using ::testing::HasSubstr;

std::string PlanPath(const std::string& name) {
  return std::string(DDPKIT_TESTDATA_DIR) + "/plans/" + name;
}

std::vector<int64_t> Sizes(const google::protobuf::RepeatedPtrField<reducer::BucketInfo>& b) {
  std::vector<int64_t> sizes;
  for (const reducer::BucketInfo& info : b) sizes.push_back(info.bytes());
  return sizes;
}

std::vector<std::vector<int64_t>> Indices(
    const google::protobuf::RepeatedPtrField<reducer::BucketInfo>& buckets) {
  std::vector<std::vector<int64_t>> out;
  for (const reducer::BucketInfo& info : buckets) {
    out.emplace_back(info.param_indices().begin(), info.param_indices().end());
  }
  return out;
}

TEST(PlanFileTest, EveryCommittedPlanIsPyTorchs) {
  int files = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(PlanPath(""))) {
    if (!entry.is_regular_file()) continue;  // plans/2.15/ holds PyTorch 2.15's
    SCOPED_TRACE(entry.path().string());
    ++files;
    absl::StatusOr<PlanFile> file = ReadPlanFile(entry.path().string());
    ASSERT_TRUE(file.ok()) << file.status();
    ASSERT_TRUE(file->ddp.has_value());
    const PyTorchDdpLog& log = *file->ddp;
    ASSERT_TRUE(log.has_rebuilt_buckets);
    absl::StatusOr<ModelBuckets> plans = PlanFileBucketPlans(*file, RecordedDdpOptions(*file));
    ASSERT_TRUE(plans.ok()) << plans.status();
    EXPECT_EQ(Sizes(plans->initial_buckets()), log.bucket_sizes);
    EXPECT_EQ(Indices(plans->initial_buckets()), log.initial_per_bucket_param_indices);
    EXPECT_FALSE(plans->grad_ready_order_estimated());
    EXPECT_EQ(Indices(plans->rebuilt_buckets()), log.rebuilt_per_bucket_param_indices);
    EXPECT_EQ(Sizes(plans->rebuilt_buckets()), log.rebuilt_bucket_sizes);
    EXPECT_TRUE(plans->pytorch().compared());
    EXPECT_TRUE(plans->pytorch().agrees()) << plans->pytorch().first_difference();
  }
  EXPECT_GE(files, 7);
}

// ddpkit's own ResNet-18 (resnet:2,2,2,2) against torchvision's resnet18 under PyTorch 1.13's
// DDP (plans/resnet18.json): the same names in the same order, and from a real iteration of
// ddpkit's model the same gradient-ready order, initial and rebuilt plans.
TEST(PlanFileTest, DdpkitsResNet18IsTorchvisions) {
  absl::StatusOr<PlanFile> file = ReadPlanFile(PlanPath("resnet18.json"));
  ASSERT_TRUE(file.ok()) << file.status();
  const PyTorchDdpLog& log = *file->ddp;
  absl::StatusOr<ModelBuckets> ours = ModelBucketPlans("resnet:2,2,2,2", RecordedDdpOptions(*file));
  ASSERT_TRUE(ours.ok()) << ours.status();
  std::vector<std::string> names;
  for (const reducer::BucketInfo& b : ours->initial_buckets()) {
    names.insert(names.end(), b.param_names().begin(), b.param_names().end());
  }
  std::vector<std::string> torch_names;
  for (const PlanTensor& p : file->parameters) torch_names.push_back(p.name);
  EXPECT_EQ(names, torch_names);
  const std::vector<int64_t> order(ours->grad_ready_order().begin(),
                                   ours->grad_ready_order().end());
  EXPECT_EQ(order, log.prev_iteration_grad_ready_order_indices);
  EXPECT_EQ(Indices(ours->initial_buckets()), log.initial_per_bucket_param_indices);
  EXPECT_EQ(Indices(ours->rebuilt_buckets()), log.rebuilt_per_bucket_param_indices);
  EXPECT_EQ(Sizes(ours->rebuilt_buckets()), log.rebuilt_bucket_sizes);
}

// The real models' shapes, as their papers give them.
TEST(PlanFileTest, CommittedModelsHaveTheirKnownSizes) {
  const std::vector<std::pair<std::string, int64_t>> models = {{"resnet50.json", 25557032},
                                                               {"vit_b_16.json", 86567656},
                                                               {"gpt2_124m.json", 124439808},
                                                               {"bert_base.json", 109482240}};
  for (const auto& [name, count] : models) {
    absl::StatusOr<PlanFile> file = ReadPlanFile(PlanPath(name));
    ASSERT_TRUE(file.ok()) << file.status();
    int64_t numel = 0;
    for (const PlanTensor& p : file->parameters) numel += p.numel;
    EXPECT_EQ(numel, count) << name;
  }
}

// A frozen layer is not DDP's (indices skip it), a float64 layer has buckets of its own, and a
// tied weight is listed once.
TEST(PlanFileTest, FrozenAndFloat64ParametersAsPyTorch) {
  absl::StatusOr<PlanFile> file = ReadPlanFile(PlanPath("mixed_toy.json"));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->DdpParameters().size(), 9u);
  ASSERT_EQ(file->aliases.size(), 1u);
  EXPECT_EQ(file->aliases[0].name, "again.weight");
  absl::StatusOr<ModelBuckets> plans = PlanFileBucketPlans(*file, RecordedDdpOptions(*file));
  ASSERT_TRUE(plans.ok()) << plans.status();
  EXPECT_THAT(plans->skipped_parameters(), ::testing::ElementsAre("frozen.weight", "frozen.bias"));
  ASSERT_EQ(plans->initial_buckets_size(), 2);
  EXPECT_EQ(plans->initial_buckets(0).dtype(), "float64");
  EXPECT_EQ(plans->initial_buckets(0).param_names(0), "wide.weight");
  EXPECT_TRUE(plans->pytorch().agrees()) << plans->pytorch().first_difference();
}

// Without a recorded order the rebuild walks reverse registration order, said to be an
// estimate; other caps than PyTorch's are not compared.
TEST(PlanFileTest, EstimatesWithoutAnOrderAndComparesOnlyLikeForLike) {
  absl::StatusOr<PlanFile> file = ReadPlanFile(PlanPath("resnet50.json"));
  ASSERT_TRUE(file.ok()) << file.status();
  reducer::DdpOptions options = RecordedDdpOptions(*file);
  options.bucket_cap_mb = 50;
  absl::StatusOr<ModelBuckets> plans = PlanFileBucketPlans(*file, options);
  ASSERT_TRUE(plans.ok()) << plans.status();
  EXPECT_FALSE(plans->pytorch().compared());
  EXPECT_THAT(plans->pytorch().not_compared(), HasSubstr("other options"));
  file->ddp.reset();
  plans = PlanFileBucketPlans(*file, {});
  ASSERT_TRUE(plans.ok()) << plans.status();
  EXPECT_TRUE(plans->grad_ready_order_estimated());
  EXPECT_EQ(plans->grad_ready_order(0), 160);
  EXPECT_THAT(plans->pytorch().not_compared(), HasSubstr("no DDP run"));
}

// A plan PyTorch logged differently is reported at its first difference.
TEST(PlanFileTest, NamesTheFirstDifference) {
  absl::StatusOr<PlanFile> file = ReadPlanFile(PlanPath("mixed_toy.json"));
  ASSERT_TRUE(file.ok()) << file.status();
  file->ddp->rebuilt_bucket_sizes[1] += 8;
  absl::StatusOr<ModelBuckets> plans = PlanFileBucketPlans(*file, RecordedDdpOptions(*file));
  ASSERT_TRUE(plans.ok()) << plans.status();
  EXPECT_FALSE(plans->pytorch().agrees());
  EXPECT_EQ(plans->pytorch().first_difference(),
            "rebuilt plan, bucket 1: ddpkit's holds 16896 bytes, PyTorch's 16904");
}

// A known difference: when the walk ends with open buckets of several dtypes, PyTorch emits them
// in its hash map's order (here float64, float32, float16: the reverse of first appearance), and
// ddpkit in order of first appearance. The verdict says so.
TEST(PlanFileTest, LeftoverBucketsOfSeveralDtypesComeInAnotherOrder) {
  absl::StatusOr<PlanFile> file =
      ReadPlanFile(std::string(DDPKIT_TESTDATA_DIR) + "/plan_leftover_order.json");
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<ModelBuckets> plans = PlanFileBucketPlans(*file, RecordedDdpOptions(*file));
  ASSERT_TRUE(plans.ok()) << plans.status();
  EXPECT_EQ(Indices(plans->rebuilt_buckets()),
            (std::vector<std::vector<int64_t>>{{1, 0}, {7, 6, 3, 2}, {5, 4}}));
  EXPECT_EQ(file->ddp->rebuilt_per_bucket_param_indices,
            (std::vector<std::vector<int64_t>>{{5, 4}, {7, 6, 3, 2}, {1, 0}}));
  EXPECT_FALSE(plans->pytorch().agrees());
  EXPECT_THAT(plans->pytorch().first_difference(), HasSubstr("the same buckets in another order"));
}

constexpr char kValid[] = R"({"format": "ddpkit-plan/1", "model": "m", "parameters": [
  {"name": "w", "shape": [2, 3], "dtype": "float32", "requires_grad": true},
  {"name": "b", "shape": [3], "dtype": "float32", "requires_grad": true}]})";

TEST(PlanFileTest, ParsesAMinimalFile) {
  absl::StatusOr<PlanFile> file = ParsePlanFile(kValid, "min.json");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->parameters[0].numel, 6);
  EXPECT_EQ(file->parameters[0].nbytes, 24);
  EXPECT_FALSE(file->ddp.has_value());
}

TEST(PlanFileTest, MalformedFilesNameTheField) {
  const std::string p0 = R"({"format": "ddpkit-plan/1", "model": "m", "parameters": [)";
  const std::string ok =
      R"({"name": "w", "shape": [2], "dtype": "float32", "requires_grad": true})";
  const std::string ddp =
      R"(, "ddp": {"world_size": 1, "backend": "gloo", "iterations": 3,
      "find_unused_parameters": false, "static_graph": false, "bucket_cap_mb": 25,
      "bucket_cap_bytes": 26214400, "first_bucket_bytes": 1048576, "has_rebuilt_buckets": true,
      "bucket_sizes": [8], "prev_iteration_grad_ready_order_indices": [0],)";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{", "f.json: not valid JSON"},
      {"[]", "the file: expected an object, got []"},
      {R"({"format": "other/2"})", R"(format: expected "ddpkit-plan/1", got "other/2")"},
      {R"({"format": "ddpkit-plan/1", "model": "m"})", "parameters: missing"},
      {p0 + "]}", "parameters: expected at least one parameter"},
      {p0 + R"({"name": "w", "shape": [2, -1], "dtype": "float32", "requires_grad": true}]})",
       "parameters[0].shape[1]: expected an integer >= 0, got -1"},
      {p0 + R"({"name": "w", "shape": [2], "dtype": "float8", "requires_grad": true}]})",
       "parameters[0].dtype: expected a PyTorch dtype"},
      {p0 + R"({"name": "w", "shape": [2], "dtype": "float32", "requires_grad": 1}]})",
       "parameters[0].requires_grad: expected true or false, got 1"},
      {p0 + R"({"name": "w", "shape": [2], "dtype": "float32"}]})",
       "parameters[0].requires_grad: missing"},
      {p0 + R"({"name": "w", "shape": [4294967296, 4294967296], "dtype": "float32",
       "requires_grad": true}]})",
       "parameters[0].shape: expected a shape whose element count fits in 64 bits"},
      {p0 + ok + "]" + ddp + R"("rebuilt_bucket_sizes": [8],
       "rebuilt_per_bucket_param_indices": [[1]]}})",
       "ddp.rebuilt_per_bucket_param_indices[0][0]: expected an integer in [0, 0], got 1"},
      {p0 + ok + "]" + ddp + R"("rebuilt_bucket_sizes": [8, 8],
       "rebuilt_per_bucket_param_indices": [[0]]}})",
       "ddp.rebuilt_per_bucket_param_indices: expected one list of indices per entry of "
       "rebuilt_bucket_sizes (2)"},
      {p0 + ok + "]" + ddp + R"("rebuilt_bucket_sizes": [8]}})",
       "ddp.rebuilt_per_bucket_param_indices: missing"},
  };
  for (const auto& [text, message] : cases) {
    absl::StatusOr<PlanFile> file = ParsePlanFile(text, "f.json");
    ASSERT_FALSE(file.ok()) << text;
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(file.status().message(), HasSubstr(message)) << text;
    EXPECT_TRUE(absl::StartsWith(file.status().message(), "f.json: ")) << file.status().message();
  }
}

TEST(PlanFileTest, AMissingFileIsNotFound) {
  absl::StatusOr<PlanFile> file = ReadPlanFile("/nonexistent/plan.json");
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(file.status().message(), HasSubstr("/nonexistent/plan.json"));
}

// A recorded order that does not name every DDP parameter once cannot be walked.
TEST(PlanFileTest, ABrokenOrderIsAnError) {
  absl::StatusOr<PlanFile> file = ReadPlanFile(PlanPath("mixed_toy.json"));
  ASSERT_TRUE(file.ok()) << file.status();
  file->ddp->prev_iteration_grad_ready_order_indices[0] = 0;
  absl::StatusOr<ModelBuckets> plans = PlanFileBucketPlans(*file, RecordedDdpOptions(*file));
  ASSERT_FALSE(plans.ok());
  EXPECT_THAT(plans.status().message(),
              HasSubstr("ddp.prev_iteration_grad_ready_order_indices: the arrival order names "
                        "parameter 0 twice"));
}

}  // namespace
}  // namespace ddpkit::jobs::plan_file_buckets_test
