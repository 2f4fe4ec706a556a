// DDP's options: the PyTorch version they follow, their one validation, and the bucket caps
// they come to under 1.13's and 2.15's rules (the goldens in tests/testdata/ddp_plans/ check
// the plans those caps make; these pin the rules themselves, case by case).
#include "reducer/ddp_options.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddpkit::reducer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr size_t kMiB = 1 << 20;

TEST(PyTorchVersionTest, ReadsWhatTorchVersionPrints) {
  for (const char* text : {"2.15", "2.15.0", "2.15.0+cu132", "2.15.0a0+git1234", "2.15rc1"}) {
    absl::StatusOr<PyTorchVersion> v = ParsePyTorchVersion(text);
    ASSERT_TRUE(v.ok()) << text << ": " << v.status();
    EXPECT_EQ(*v, (PyTorchVersion{2, 15})) << text;
  }
  EXPECT_EQ(*ParsePyTorchVersion("1.13.1"), (PyTorchVersion{1, 13}));
  EXPECT_EQ(ParsePyTorchVersion("2.4")->ToString(), "2.4");
}

TEST(PyTorchVersionTest, RefusesWhatItDoesNotKnowSayingWhatItKnows) {
  for (const char* text : {"", "2", "2.", "two.15", "2.15-1", "12345.1", "2.15.", ".15"}) {
    absl::StatusOr<PyTorchVersion> v = ParsePyTorchVersion(text);
    ASSERT_FALSE(v.ok()) << text;
    EXPECT_THAT(v.status().message(), HasSubstr("not a PyTorch version")) << text;
  }
  for (const char* text : {"1.12", "2.16", "3.0"}) {
    absl::StatusOr<PyTorchVersion> v = ParsePyTorchVersion(text);
    ASSERT_FALSE(v.ok()) << text;
    EXPECT_THAT(v.status().message(), HasSubstr("1.13 to 2.15")) << text;
  }
}

TEST(PyTorchVersionTest, APlanFilesVersionIsClampedWithANote) {
  std::string note;
  EXPECT_EQ(*NearestKnownPyTorch("2.16.0", &note), kNewestPyTorch);
  EXPECT_THAT(note, HasSubstr("recorded with PyTorch 2.16"));
  EXPECT_EQ(*NearestKnownPyTorch("1.12.1", &note), kOldestPyTorch);
  EXPECT_THAT(note, HasSubstr("1.13's rules"));
  EXPECT_EQ(*NearestKnownPyTorch("2.5.1", &note), (PyTorchVersion{2, 5}));
  EXPECT_EQ(note, "");
  EXPECT_FALSE(NearestKnownPyTorch("latest", &note).ok());
}

TEST(PyTorchVersionTest, EachRuleStartsAtItsRelease) {
  EXPECT_FALSE(Follows({2, 3}, DdpRule::kGivenCapCapsFirstBucket));
  EXPECT_TRUE(Follows({2, 4}, DdpRule::kGivenCapCapsFirstBucket));
  EXPECT_FALSE(Follows({2, 10}, DdpRule::kPerBucketCaps));
  EXPECT_TRUE(Follows({2, 11}, DdpRule::kPerBucketCaps));
  EXPECT_FALSE(Follows({1, 13}, DdpRule::kStaticGraphCountsBackwards));
  EXPECT_TRUE(Follows(kDefaultPyTorch, DdpRule::kSkipAllReduceUnusedParams));
}

// 1.13: the first bucket's cap is the module attribute's whether or not a cap was passed.
TEST(BucketCapsTest, Under113TheFirstBucketKeepsItsOwnCap) {
  const BucketCaps caps = BucketCapsOf({.pytorch_version = {1, 13}, .bucket_cap_mb = 25});
  EXPECT_EQ(caps.rebuild.first_bucket_bytes, kMiB);
  EXPECT_EQ(caps.rebuild.bucket_cap_bytes, 25 * kMiB);
  EXPECT_THAT(caps.initial, ElementsAre(kNoBucketSizeLimit));
  const BucketCaps unused = BucketCapsOf(
      {.pytorch_version = {1, 13}, .bucket_cap_mb = 2, .find_unused_parameters = true});
  EXPECT_THAT(unused.initial, ElementsAre(kMiB, 2 * kMiB));
}

// 2.4 onwards: a passed cap, even 25, is the first bucket's too; an unset one keeps 1 MiB.
TEST(BucketCapsTest, From24APassedCapCapsTheFirstBucket) {
  const BucketCaps unset = BucketCapsOf({});
  EXPECT_EQ(unset.rebuild.first_bucket_bytes, kMiB);
  EXPECT_EQ(unset.rebuild.bucket_cap_bytes, 25 * kMiB);
  const BucketCaps passed = BucketCapsOf({.bucket_cap_mb = 25});
  EXPECT_EQ(passed.rebuild.first_bucket_bytes, 25 * kMiB);
  EXPECT_THAT(passed.rebuild.Walk(), ElementsAre(25 * kMiB, 25 * kMiB));
  // find_unused_parameters' first iteration: one cap, or [first, cap] while it is smaller.
  EXPECT_THAT(BucketCapsOf({.bucket_cap_mb = 4, .find_unused_parameters = true}).initial,
              ElementsAre(4 * kMiB));
  EXPECT_THAT(BucketCapsOf({.find_unused_parameters = true}).initial, ElementsAre(kMiB, 25 * kMiB));
  EXPECT_THAT(BucketCapsOf({.first_bucket_mb = 30, .find_unused_parameters = true}).initial,
              ElementsAre(25 * kMiB));
  // Static graph never splits the first iteration.
  EXPECT_THAT(
      BucketCapsOf({.bucket_cap_mb = 4, .find_unused_parameters = true, .static_graph = true})
          .initial,
      ElementsAre(kNoBucketSizeLimit));
}

// 2.11: the list is both plans' walk, and its largest entry the logged cap.
TEST(BucketCapsTest, From211ACapListIsEveryPlansWalk) {
  const BucketCaps caps = BucketCapsOf({.bucket_cap_mb_list = {1, 8, 4}});
  EXPECT_THAT(caps.initial, ElementsAre(kMiB, 8 * kMiB, 4 * kMiB));
  EXPECT_THAT(caps.rebuild.Walk(), ElementsAre(kMiB, 8 * kMiB, 4 * kMiB));
  EXPECT_EQ(caps.rebuild.bucket_cap_bytes, 8 * kMiB);
}

TEST(ValidateDdpOptionsTest, NamesTheOptionAndItsFlag) {
  for (double bad : {0.0, -1.0, 1e-9, 1e300}) {
    absl::Status s = ValidateDdpOptions({.bucket_cap_mb = bad});
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_THAT(s.message(), HasSubstr("bucket_cap_mb (--bucket-cap-mb) must be a positive size"));
  }
  EXPECT_THAT(ValidateDdpOptions({.first_bucket_mb = 0}).message(),
              HasSubstr("first_bucket_mb (--first-bucket-mb)"));
  EXPECT_THAT(ValidateDdpOptions({.bucket_cap_mb_list = {1, -2}}).message(),
              HasSubstr("bucket_cap_mb_list"));
  EXPECT_TRUE(ValidateDdpOptions({}).ok());
  EXPECT_TRUE(
      ValidateDdpOptions({.pytorch_version = {1, 13}, .bucket_cap_mb = 2, .first_bucket_mb = 0.5})
          .ok());
}

TEST(ValidateDdpOptionsTest, RefusesWhatTheChosenPyTorchLacksOrIgnores) {
  absl::Status list = ValidateDdpOptions({.pytorch_version = {2, 10}, .bucket_cap_mb_list = {1}});
  EXPECT_THAT(list.message(), HasSubstr("bucket_cap_mb_list is PyTorch 2.11's"));
  EXPECT_THAT(list.message(), HasSubstr("follow PyTorch 2.10"));
  absl::Status both = ValidateDdpOptions({.bucket_cap_mb = 2, .first_bucket_mb = 0.5});
  EXPECT_THAT(both.message(), HasSubstr("has no effect once bucket_cap_mb is given"));
  absl::Status with_list = ValidateDdpOptions({.bucket_cap_mb = 2, .bucket_cap_mb_list = {1}});
  EXPECT_THAT(with_list.message(), HasSubstr("give it alone"));
  EXPECT_THAT(ValidateDdpOptions({.pytorch_version = {1, 12}}).message(),
              HasSubstr("not one ddpkit knows"));
}

}  // namespace
}  // namespace ddpkit::reducer
