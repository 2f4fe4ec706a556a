// `ddpkit fr analyze DIR --plan FILE` on a real PyTorch 2.15 DDP job that hung on uneven inputs
// (tools/scripts/golden/make_torch_fr_ddp_golden.py): three gloo ranks, two buckets
// (bucket_cap_mb=0.004), rank 2 out of batches after 3 iterations, ranks 0 and 1 left in
// iteration 3's first bucket.
#include "tools/jobs/fr/ddp_labels.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "autograd/base/file_util.h"
#include "gtest/gtest.h"
#include "tools/jobs/fr/analyze.h"

namespace ddpkit::jobs {

using torch_formats::FrEntry;
namespace {

const std::string kCase = absl::StrCat(DDPKIT_TESTDATA_DIR, "/torch_fr_ddp/torch-2.15/uneven");
const std::string kPlan = kCase + "/plan.json";

const FrEntry* EntryOn(const FlightRecorderAnalysis& a, int rank, int64_t seq) {
  for (const FrEntry& e : a.ranks(rank).last_entries()) {
    if (e.seq() == seq) return &e;
  }
  return nullptr;
}

TEST(FrDdpLabelsTest, EveryCallOfTheJobIsNamedByWhatDdpIssuedItFor) {
  for (const std::string form : {"json", "pickle"}) {
    SCOPED_TRACE(form);
    absl::StatusOr<FlightRecorderAnalysis> a =
        AnalyzeFlightRecorders(kCase + "/" + form, 16, kPlan);
    ASSERT_TRUE(a.ok()) << a.status();
    // Rank 0's 12 calls: the constructor's three, iteration 0's one bucket (the initial plan),
    // the rebuild's two broadcasts, then two buckets per iteration.
    const std::vector<std::tuple<int, std::string, int, int>> expected = {
        {1, "ddp_param_check", -1, 0},
        {2, "ddp_param_check", -1, 0},
        {3, "ddp_module_states", -1, 0},
        {4, "bucket", 0, 0},
        {5, "rebuild", -1, 0},
        {6, "rebuild", -1, 0},
        {7, "bucket", 0, 1},
        {8, "bucket", 1, 1},
        {11, "bucket", 0, 3},
        {12, "bucket", 1, 3}};
    for (const auto& [seq, purpose, bucket, iteration] : expected) {
      const FrEntry* e = EntryOn(*a, 0, seq);
      ASSERT_NE(e, nullptr) << seq;
      EXPECT_EQ(e->purpose(), purpose) << seq;
      if (purpose != "bucket") continue;
      EXPECT_EQ(e->bucket(), bucket) << seq;
      EXPECT_EQ(e->iteration(), iteration) << seq;
    }
    EXPECT_EQ(EntryOn(*a, 0, 7)->ddp_params(), "4.bias, 4.weight, 2.bias, 2.weight");
    EXPECT_EQ(EntryOn(*a, 0, 8)->ddp_params(), "0.bias, 0.weight");
    EXPECT_TRUE(EntryOn(*a, 2, 10)->last_bucket());
  }
}

TEST(FrDdpLabelsTest, ARankAWholeIterationBehindIsCalledUnevenInputsWithTheFix) {
  absl::StatusOr<FlightRecorderAnalysis> a = AnalyzeFlightRecorders(kCase + "/json", 8, kPlan);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_FALSE(a->findings().empty());
  const FrFinding& f = a->findings(0);
  EXPECT_EQ(f.kind(), "missing");
  EXPECT_EQ(f.pattern(), "uneven_inputs");
  EXPECT_TRUE(
      absl::StrContains(f.text(),
                        "rank 2 never issued gloo:all_reduce Float[1188] seq 11 (DDP bucket 0 of "
                        "iteration 3: 4.bias, 4.weight, 2.bias, 2.weight)"))
      << f.text();
  EXPECT_TRUE(absl::StrContains(f.text(), "rank 2 finished iteration 2 and issued nothing more"))
      << f.text();
  EXPECT_TRUE(absl::StrContains(f.text(), "Join([model])")) << f.text();
  EXPECT_EQ(f.stack_rank(), 0);  // where rank 0 issued what rank 2 never did
  EXPECT_EQ(a->diagnosis(), f.text());
}

// The labels come from the plan, not from the dumps: without it nothing is named, and a plan of
// other caps names none of the job's gradient allreduces as buckets, nor calls it uneven inputs.
TEST(FrDdpLabelsTest, WithoutTheRightPlanNothingIsCalledUnevenInputs) {
  absl::StatusOr<FlightRecorderAnalysis> plain = AnalyzeFlightRecorders(kCase + "/json");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->findings(0).pattern(), "");
  EXPECT_FALSE(absl::StrContains(plain->findings(0).text(), "uneven")) << plain->diagnosis();

  absl::StatusOr<std::string> text = ReadFileToString(kPlan);
  ASSERT_TRUE(text.ok());
  const std::string other = ::testing::TempDir() + "/other_caps_" + std::to_string(::getpid());
  std::ofstream(other) << absl::StrReplaceAll(
      *text, {{"\"bucket_cap_mb\": 0.004", "\"bucket_cap_mb\": 25"}});
  absl::StatusOr<FlightRecorderAnalysis> wrong = AnalyzeFlightRecorders(kCase + "/json", 16, other);
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  EXPECT_EQ(wrong->findings(0).pattern(), "");
  EXPECT_NE(EntryOn(*wrong, 0, 11)->purpose(), "bucket");
  std::filesystem::remove(other);
}

TEST(FrDdpLabelsTest, AMissingPlanFileIsNamed) {
  absl::StatusOr<FlightRecorderAnalysis> a =
      AnalyzeFlightRecorders(kCase + "/json", 8, kCase + "/no_such_plan.json");
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(absl::StrContains(a.status().message(), "no_such_plan.json")) << a.status();
}

TEST(FrDdpLabelsTest, PurposeWordsAndTheHintsConditions) {
  EXPECT_EQ(PurposeWords("rebuild"), "DDP's bucket rebuild: rank 0's new plan");
  EXPECT_EQ(PurposeWords("job"), "job");
  FrEntry last, next;
  last.set_purpose("bucket");
  last.set_bucket(1);
  last.set_iteration(2);
  last.set_last_bucket(true);
  next.set_purpose("bucket");
  next.set_bucket(0);
  next.set_iteration(3);
  EXPECT_TRUE(UnevenInputsHint(last, next, 2).has_value());
  last.set_last_bucket(false);  // stopped inside an iteration: not uneven inputs
  EXPECT_FALSE(UnevenInputsHint(last, next, 2).has_value());
  last.set_last_bucket(true);
  next.set_bucket(1);  // the others' missing call is not an iteration's first
  EXPECT_FALSE(UnevenInputsHint(last, next, 2).has_value());
}

}  // namespace
}  // namespace ddpkit::jobs
