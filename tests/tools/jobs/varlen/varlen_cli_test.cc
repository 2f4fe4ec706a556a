// `ddpkit varlen` run as a user would: the story, its files and errors, and the same recipe
// across Gloo processes under `ddpkit launch` giving the threads world's layout and shards.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "autograd/nn/safetensors.h"
#include "gtest/gtest.h"
#include "tests/run_command.h"

namespace {

using Result = ddpkit::testing_util::CommandResult;

const std::string kDumpDir = ddpkit::testing_util::SendFrDumpsToTempDir("ddpkit_fr_varlen");
const std::string kSmall =
    " --model seq:32,8,16,4 --samples 300 --min-length 2 --max-length 48 --max-tokens 192 "
    "--epochs 2 --timeout 30";

Result Varlen(const std::string& args) {
  return ddpkit::testing_util::RunCommand(DDPKIT_BINARY_DIR "/bin/ddpkit varlen" + kSmall + " " +
                                          args);
}

std::string Temp(const std::string& name) {
  return testing::TempDir() + "/varlen_" + std::to_string(::getpid()) + "_" + name;
}

TEST(VarlenCliTest, TheStoryTheFilesAndTheErrors) {
  const std::string out = Temp("out");
  Result r = Varlen("--world-size 3 --out " + out);
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* part :
       {"1. the layouts", "<- trained", "2. the distributed sample sort", "3. training",
        "4. the averaging pitfall", "final models identical on all ranks: yes"}) {
    EXPECT_TRUE(absl::StrContains(r.out, part)) << part << "\n" << r.out;
  }
  {
    std::ifstream in(out + "/imbalance.svg");
    const std::string svg(std::istreambuf_iterator<char>(in), {});
    // One bar per step: the work, and what every other rank waits for, each step's numbers
    // in its tooltip.
    EXPECT_TRUE(absl::StrContains(svg, "the busiest rank's excess")) << svg.substr(0, 400);
    EXPECT_TRUE(absl::StrContains(svg, "step 0: the mean rank's")) << svg.substr(0, 400);
  }
  EXPECT_TRUE(std::filesystem::file_size(out + "/steps.csv") > 100);

  r = Varlen("--curriculum sorted");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "--curriculum must be ascending, descending or bucketed"))
      << r.err;
  r = Varlen("--max-tokens 20");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "raise --max-tokens")) << r.err;
  r = Varlen("--trace /tmp/x.json");
  EXPECT_EQ(r.status, 2) << "varlen does not take --trace";
  // Fixed batches of 1 over 3 samples on 2 ranks: rank 0 has 2, rank 1 has 1.
  r = Varlen("--world-size 2 --samples 3 --max-tokens 0 --batch-size 1 --no-join");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "Drop --no-join")) << r.err;
}

// The JSON on stdout; under the launcher each line carries a "[rank 0] " prefix to drop.
nlohmann::json Json(const Result& r) {
  EXPECT_EQ(r.status, 0) << r.err << r.out;
  std::string text;
  for (absl::string_view line : absl::StrSplit(r.out, '\n')) {
    absl::ConsumePrefix(&line, "[rank 0] ");
    absl::StrAppend(&text, line, "\n");
  }
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

TEST(VarlenCliTest, GlooProcessesDealAndBatchAsTheThreadsWorld) {
  const std::string threads_prefix = Temp("threads"), gloo_prefix = Temp("gloo");
  const nlohmann::json threads =
      Json(Varlen("--world-size 3 --json --dump-shards " + threads_prefix));
  const Result launched = ddpkit::testing_util::RunCommand(
      DDPKIT_BINARY_DIR
      "/bin/ddpkit launch --standalone --teardown-grace 8 --nproc-per-node 3 -- " DDPKIT_BINARY_DIR
      "/bin/ddpkit varlen --backend gloo --json" +
      kSmall + " --dump-shards " + gloo_prefix);
  const nlohmann::json gloo = Json(launched);
  ASSERT_FALSE(threads.is_discarded() || gloo.is_discarded()) << launched.out;
  EXPECT_EQ(gloo["backend"], "gloo");
  EXPECT_EQ(gloo["layouts"], threads["layouts"]);
  EXPECT_EQ(gloo["sort"], threads["sort"]);
  ASSERT_EQ(gloo["steps"].size(), threads["steps"].size());
  for (size_t t = 0; t < gloo["steps"].size(); ++t) {
    EXPECT_EQ(gloo["steps"][t]["batch_sizes"], threads["steps"][t]["batch_sizes"]);
    EXPECT_EQ(gloo["steps"][t]["lr"], threads["steps"][t]["lr"]);
    EXPECT_NEAR(gloo["steps"][t]["loss"].get<double>(), threads["steps"][t]["loss"].get<double>(),
                1e-4);
  }
  EXPECT_EQ(gloo["models_identical"], true);
  EXPECT_LT(gloo["weighting_check"]["sample_error"].get<double>(), 1e-5);
  for (int r = 0; r < 3; ++r) {
    const std::string suffix = ".rank" + std::to_string(r) + ".safetensors";
    absl::StatusOr<ddpkit::SafetensorsFile> a = ddpkit::ReadSafetensors(threads_prefix + suffix);
    absl::StatusOr<ddpkit::SafetensorsFile> b = ddpkit::ReadSafetensors(gloo_prefix + suffix);
    ASSERT_TRUE(a.ok() && b.ok()) << suffix;
    EXPECT_EQ(a->Find("ids")->ToDoubles(), b->Find("ids")->ToDoubles()) << "rank " << r;
    EXPECT_EQ(a->Find("lengths")->ToDoubles(), b->Find("lengths")->ToDoubles()) << "rank " << r;
  }
}

}  // namespace
