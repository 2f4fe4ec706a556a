// The ddpkit binary, run as a user would: exit statuses, one-line errors, pure JSON on stdout.

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "autograd/cuda/runtime.h"
#include "autograd/nn/safetensors.h"
#include "gtest/gtest.h"
#include "tests/run_command.h"

namespace {

using Result = ddpkit::testing_util::CommandResult;

// Failing jobs leave their flight-recorder dumps in the test's temporary folder.
const std::string kDumpDir = ddpkit::testing_util::SendFrDumpsToTempDir("ddpkit_fr_cli");

// Runs `ddpkit ARGS` from the build tree (with `env`, "NAME=value ...", in its environment),
// capturing stdout and stderr separately.
Result RunDdpkit(const std::string& args, const std::string& env = "") {
  return ddpkit::testing_util::RunCommand(env + " " + std::string(DDPKIT_BINARY_DIR) +
                                          "/bin/ddpkit " + args);
}

int Lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

TEST(CliTest, HelpListsSubcommands) {
  Result r = RunDdpkit("--help");
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(absl::StrContains(r.out, "train")) << r.out;
  r = RunDdpkit("train --help");
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(absl::StrContains(r.out, "--batch-size")) << r.out;
}

// Each subcommand's --help: flags grouped by topic, short lines, and a shared flag's help cut to
// what this subcommand does with it.
TEST(CliTest, HelpIsGroupedByTopicInShortLines) {
  for (const char* name : {"train", "join", "contrastive", "recompute", "varlen", "launch", "bench",
                           "trace", "fr", "chaos", "relay", "buckets", "simulate"}) {
    Result r = RunDdpkit(std::string(name) + " --help");
    ASSERT_EQ(r.status, 0) << name;
    for (absl::string_view line : absl::StrSplit(r.out, '\n')) {
      EXPECT_LE(line.size(), 120u) << name << ": " << line;
    }
  }
  Result r = RunDdpkit("train --help");
  for (const char* heading : {"\nthe world: who runs, where:\n", "\nthe model and its data:\n",
                              "\nDDP's options, as PyTorch's DistributedDataParallel takes them:\n",
                              "\nchecks for CI (exit 3 when one fails):\n"}) {
    EXPECT_TRUE(absl::StrContains(r.out, heading)) << heading << r.out;
  }
  EXPECT_LT(r.out.find("--bucket-cap-mb "), r.out.find("--check ")) << r.out;
  r = RunDdpkit("contrastive --help");
  EXPECT_TRUE(absl::StrContains(r.out, "write curves.csv and curves.svg into this directory\n"))
      << r.out;
  EXPECT_FALSE(absl::StrContains(r.out, "bench paper")) << r.out;
}

TEST(CliTest, UsageErrorsAreOneLineAndExit2) {
  for (const char* args : {"",
                           "no-such-subcommand",
                           "train --no-such-flag",
                           "train --steps=abc",
                           "train --steps",
                           "train extra-positional",
                           "train --model mlp:3",
                           "train --bucket-cap-mb 0",
                           "train --comm-hook fp8",
                           "train --grad-accum 0",
                           "train --world-size 0",
                           "buckets --sizes 1,x",
                           "buckets --sizes 4,4 --order 1",
                           "buckets --sizes 4 --dtypes f32,f64",
                           "buckets --sizes 4 --limits 0",
                           "join",
                           "join --inputs 3,x",
                           "join --inputs 3,-1",
                           "join --inputs 2,2 --world-size 3",
                           "join --inputs 2,2 --data-per-rank p",
                           "join --inputs 2,2 --optimizer adam",
                           "join --inputs 2,2 --no-join --throw-on-early-termination",
                           "train --optimizer zero",
                           "train --sync-batchnorm",
                           "join --inputs 2,2 --model gpt:layers=1,heads=1,dim=4,ctx=4,vocab=5 "
                           "--sync-batchnorm",
                           "contrastive --gather mean",
                           "contrastive --layout diag",
                           "contrastive --optimizer zero-sgd",
                           "contrastive --steps -1",
                           "contrastive --device gpu",
                           "contrastive --image-tower resnet:1,1,1,1",
                           "contrastive --image-tower gpt:layers=1,heads=1,dim=4,ctx=4,vocab=4 "
                           "--text-tower gpt:layers=1,heads=1,dim=4,ctx=4,vocab=4",
                           "recompute --blocks 0",
                           "recompute --width -3",
                           "recompute --world-size 2 --steps 0",
                           "bench paper --sync-every 2,4",
                           "bench paper --sync-every 1,0",
                           "bench paper --bucket-caps 0,-1",
                           "bench ddp --bucket-caps 0",
                           "bench sweep"}) {
    Result r = RunDdpkit(args);
    EXPECT_EQ(r.status, 2) << args;
    if (*args == '\0') continue;  // bare `ddpkit` prints the overview on stderr
    EXPECT_EQ(Lines(r.err), 1) << args << ": " << r.err;
    EXPECT_TRUE(absl::StartsWith(r.err, "ddpkit")) << r.err;
  }
}

// Every subcommand that takes --model (`ddpkit --help`; contrastive names its towers with its
// own flags), run on a tiny GPT and a tiny ResNet: it runs (0), or refuses the family in one
// line that says what it takes instead (2) — never a crash.
TEST(CliTest, EverySubcommandTakingAModelRunsOrRefusesEachFamily) {
  struct Case {
    std::string args;
    int status;           // for both families
    std::string refusal;  // in the one-line error when status is 2
  };
  const Case cases[] = {
      {"train --steps 1 --batch-size 2", 0, ""},
      {"join --inputs 2,1 --batch-size 2", 0, ""},
      {"buckets", 0, ""},
      {"bench ddp --iters 1 --warmup-iters 0 --batch-size 2 --bucket-caps 1", 0, ""},
      {"bench paper --iters 1 --warmup-iters 0 --batch-size 2 --bucket-caps 0,1 "
       "--sync-every 1,2",
       0, ""},
      {"recompute --steps 2 --batch-size 2", 0, ""},
      {"recompute --blocks 3", 2, "--blocks and --width shape the built-in block MLP"},
      {"simulate --world-size 2", 2, "--calibrate TRACE"},
      {"varlen", 2, "seq:"},
  };
  for (const char* model : {"gpt:layers=1,heads=2,dim=8,ctx=4,vocab=8",
                            "resnet:1,1,1,1,width=2,in=1,classes=3,stem=small"}) {
    for (const Case& c : cases) {
      const std::string args = c.args + " --model " + model;
      Result r = RunDdpkit(args);
      EXPECT_EQ(r.status, c.status) << args << ": " << r.err;
      if (c.status == 0) continue;
      EXPECT_EQ(Lines(r.err), 1) << args << ": " << r.err;
      EXPECT_TRUE(absl::StrContains(r.err, c.refusal)) << args << ": " << r.err;
    }
  }
}

// A value of the wrong type is named once, with what the flag takes.
TEST(CliTest, AValueOfTheWrongTypeSaysWhatTheFlagTakes) {
  for (const auto& [args, expected] : std::vector<std::pair<std::string, std::string>>{
           {"train --steps abc", "invalid value 'abc' for flag '--steps': expected an integer"},
           {"train --lr fast", "invalid value 'fast' for flag '--lr': expected a number"},
           {"train --json=maybe",
            "invalid value 'maybe' for flag '--json': expected true or false"}}) {
    const Result r = RunDdpkit(args);
    EXPECT_EQ(r.status, 2) << args;
    EXPECT_EQ(Lines(r.err), 1) << args << ": " << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, expected)) << args << ": " << r.err;
    EXPECT_FALSE(absl::StrContains(r.err, "Illegal value")) << args << ": " << r.err;
  }
}

// Data that cannot be read is refused before any rank starts: one line naming the flag, and no
// flight-recorder dumps left behind (a rank failing to read would fail its peers' collectives).
TEST(CliTest, UnreadableDataIsRefusedBeforeAnyRankStarts) {
  const std::string dir = ::testing::TempDir() + "/unreadable_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  for (const char* flag : {"--data", "--eval-data", "--text"}) {
    const Result r = ddpkit::testing_util::RunCommand(absl::StrCat(
        "cd ", dir, " && ", DDPKIT_BINARY_DIR, "/bin/ddpkit train ", flag, " /missing/rows"));
    EXPECT_EQ(r.status, 1) << flag << ": " << r.err;
    EXPECT_EQ(Lines(r.err), 1) << flag << ": " << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, absl::StrCat(flag, " '/missing/rows' cannot be read")))
        << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/ddpkit_fr"));
}

TEST(CliTest, FlagSpellings) {
  EXPECT_EQ(RunDdpkit("train --steps 1 --batch-size=4 --nojson").status, 0);
  EXPECT_EQ(RunDdpkit("train --steps=1 --batch_size 4").status, 0);
}

TEST(CliTest, JsonModePrintsOnlyJsonWithOneLossPerStep) {
  Result r = RunDdpkit("train --json --steps 7 --batch-size 8");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json report = nlohmann::json::parse(r.out);  // throws if anything else is on stdout
  ASSERT_TRUE(report["losses"].is_array());
  EXPECT_EQ(report["losses"].size(), 7u);
  EXPECT_EQ(report["batch_size"], 8);
  EXPECT_EQ(report["parameter_names"][0], "0.weight");
}

TEST(CliTest, JsonModeCarriesTheDdpLoggingData) {
  Result r = RunDdpkit("train --json --steps 3 --batch-size 4 --world-size 2 --grad-accum 2");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["world_size"], 2);
  EXPECT_EQ(report["grad_accum"], 2);
  EXPECT_TRUE(report["median_step_ms"].is_number());
  EXPECT_EQ(report["ddp"]["has_rebuilt_buckets"], true);
  EXPECT_EQ(report["ddp"]["initial_buckets"].size(), 1u);
  // train's default model, mlp:32,512,512,512,512,10: five Linears, ten parameters
  EXPECT_EQ(report["ddp"]["prev_iteration_grad_ready_order_indices"].size(), 10u);
}

// Once warm, a DDP step's tensors come from the caching allocator (not under ASan, where it
// caches nothing so that every free is checked). A step makes dozens of tensors; the cache
// holds as many blocks of a size as were ever alive at once, and a rank whose timing shifts
// (its peer's allreduce still holding a buffer) may need one more, once.
TEST(CliTest, AWarmTrainingStepAsksTheSystemForAlmostNoMemory) {
  Result r = RunDdpkit("train --json --steps 12 --batch-size 16 --world-size 2");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json report = nlohmann::json::parse(r.out);
  if (!report.value("host_cache", false)) GTEST_SKIP() << "the host cache is off in this build";
  EXPECT_LE(report["host_allocations_when_warm"].get<int64_t>(), 3) << r.out;
  r = RunDdpkit("train --json --steps 12 --batch-size 16 --world-size 2", "DDPKIT_HOST_CACHE=0");
  ASSERT_EQ(r.status, 0) << r.err;
  report = nlohmann::json::parse(r.out);
  EXPECT_GT(report["host_allocations_when_warm"].get<int64_t>(), 100) << r.out;
}

// PyTorch's test vector D through the command line, and the exact JSON shape.
TEST(CliTest, BucketsPrintsTheAssignment) {
  Result r = RunDdpkit(
      "buckets --sizes 50,25,50,25,50,25 --dtypes f32,f64,f32,f64,f32,f64 "
      "--limits 200,400 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out),
            nlohmann::json::parse(R"({"schema_version": 1, "report": "BucketPlan",
                "buckets": [[0], [1], [2, 4], [3, 5]], "limits": [200, 200, 400, 400]})"));
  r = RunDdpkit("buckets --sizes 100,100,100 --sparse 1 --limits 400 --json");
  EXPECT_EQ(nlohmann::json::parse(r.out),
            nlohmann::json::parse(R"({"schema_version": 1, "report": "BucketPlan",
                "buckets": [[0], [1], [2]], "limits": [400, 0, 400]})"));
  r = RunDdpkit("buckets --sizes 10,10,10,10 --limits 40,80 --order 3,2,1,0");
  EXPECT_TRUE(absl::StrContains(r.out, "2, 1")) << r.out;
  r = RunDdpkit("buckets --model mlp:4,8,3 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json plans = nlohmann::json::parse(r.out);
  EXPECT_EQ(plans["initial"]["buckets"], nlohmann::json::parse("[[0, 1, 2, 3]]"));
  EXPECT_EQ(plans["rebuilt"]["buckets"].size(), 1u);
}

// A model's rebuilt first bucket holds more than its 1 MiB cap; the text says why.
TEST(CliTest, BucketsForAModelSaysWhyTheFirstBucketPassesItsCap) {
  const Result r = RunDdpkit("buckets --model mlp:784,2048,2048,10");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "First bucket: capped at 1048576 bytes")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "4 tensors, 16867368 bytes (more than the cap)")) << r.out;
}

// A PyTorch model's plan file: the story (both plans by name, the first bucket's effect, the
// verdict against PyTorch's logged plan) and --json in `--model --json`'s shape.
TEST(CliTest, BucketsReadsAPlanFile) {
  const std::string plan = std::string(DDPKIT_TESTDATA_DIR) + "/plans/resnet50.json";
  Result r = RunDdpkit("buckets --params " + plan);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "DDP's buckets for torchvision:resnet50 (161 parameters"))
      << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "160 fc.bias, 159 fc.weight")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "First bucket: capped at 1048576 bytes")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "2 tensors, 8196000 bytes (more than the cap)")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "Agrees with PyTorch: yes")) << r.out;
  r = RunDdpkit("buckets --params " + plan + " --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json report = nlohmann::json::parse(r.out);
  for (const char* key : {"model", "initial", "rebuilt", "grad_ready_order", "initial_buckets",
                          "rebuilt_buckets", "first_bucket_bytes", "bucket_cap_bytes"}) {
    EXPECT_TRUE(report.contains(key)) << key;
  }
  EXPECT_EQ(report["rebuilt"]["buckets"].size(), 5u);
  EXPECT_EQ(report["pytorch"]["agrees"], true);
  r = RunDdpkit("buckets --params " + plan + " --bucket-cap-mb 50");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "Agrees with PyTorch: not compared")) << r.out;
}

TEST(CliTest, BucketsNamesTheBadFieldOfAPlanFile) {
  const std::string path = ::testing::TempDir() + "/bad_plan.json";
  std::ofstream(path) << R"({"format": "ddpkit-plan/1", "model": "m", "parameters": [)"
                      << R"({"name": "w", "shape": [2, "x"], "dtype": "float32"}]})";
  Result r = RunDdpkit("buckets --params " + path);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_TRUE(
      absl::StrContains(r.err, "parameters[0].shape[1]: expected an integer >= 0, got \"x\""))
      << r.err;
  r = RunDdpkit("buckets --params /nonexistent/plan.json");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "/nonexistent/plan.json")) << r.err;
  r = RunDdpkit("buckets --params " + path + " --sizes 4");
  EXPECT_EQ(r.status, 2);
}

TEST(CliTest, MissingFilesFailWithExit1AndNameTheFile) {
  Result r = RunDdpkit("train --weights /nonexistent/w.safetensors");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "/nonexistent/w.safetensors")) << r.err;
}

// PyTorch's divide-mode rule through the command line: with 3 ranks holding 2, 4, 3 batches,
// iteration 2 has ranks 1 and 2 active and iteration 3 only rank 1.
TEST(CliTest, JoinReportsEveryIterationAndTheFinalSync) {
  for (const char* divide : {"true", "false"}) {
    Result r = RunDdpkit(std::string("join --json --inputs 2,4,3 --batch-size 4 --model mlp:6,8,3 "
                                     "--divide-by-initial-world-size ") +
                         divide);
    ASSERT_EQ(r.status, 0) << r.err;
    nlohmann::json report = nlohmann::json::parse(r.out);
    ASSERT_EQ(report["iterations"].size(), 4u);
    EXPECT_EQ(report["iterations"][2]["active_ranks"], nlohmann::json::parse("[1, 2]"));
    EXPECT_EQ(report["iterations"][2]["shadowing_ranks"], nlohmann::json::parse("[0]"));
    EXPECT_EQ(report["iterations"][3]["active_ranks"], nlohmann::json::parse("[1]"));
    const bool by_world = std::string(divide) == "true";
    EXPECT_EQ(report["iterations"][0]["divide_factor"], 3.0);
    EXPECT_EQ(report["iterations"][2]["divide_factor"], by_world ? 3.0 : 2.0);
    EXPECT_EQ(report["iterations"][3]["divide_factor"], by_world ? 3.0 : 1.0);
    // The joined rank issued exactly what the active one did.
    EXPECT_EQ(report["iterations"][3]["active_collectives"],
              report["iterations"][3]["shadowing_collectives"]);
    EXPECT_GE(report["iterations"][3]["active_collectives"].size(), 3u);
    EXPECT_EQ(report["authoritative_rank"], 1);
    EXPECT_EQ(report["models_identical"], true);
    EXPECT_EQ(report["stopped_at_iteration"], -1);
  }
}

// PyTorch's test_ddp_uneven_inputs: no_sync except every k-th iteration, under Join. A joined
// rank still shadows exactly what the active ones issue: the bucket allreduces only in synced
// iterations.
TEST(CliTest, JoinWithGradAccumSyncsEveryKthIterationAndStillAgrees) {
  Result r = RunDdpkit(
      "join --json --inputs 2,5,3 --batch-size 4 --model mlp:6,8,8,8,3,tied=1 --grad-accum 2 "
      "--loss sum --lr 0.01");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["grad_accum"], 2);
  ASSERT_EQ(report["iterations"].size(), 5u);
  for (int t = 2; t < 5; ++t) {
    SCOPED_TRACE(t);
    EXPECT_EQ(report["iterations"][t]["active_collectives"],
              report["iterations"][t]["shadowing_collectives"]);
  }
  // Iteration 3 (no_sync) issues Join's count and plan only; 4 (synced) its buckets too.
  EXPECT_LT(report["iterations"][3]["active_collectives"].size(),
            report["iterations"][4]["active_collectives"].size());
  EXPECT_EQ(report["models_identical"], true);
  EXPECT_EQ(RunDdpkit("join --inputs 2,3 --grad-accum 0").status, 2);
}

// branch=rank1+iters: control flow different across ranks and iterations (PyTorch's
// test_ddp_control_flow_different_across_ranks) under Join with uneven inputs: with
// --find-unused-parameters the ranks agree; without, iteration 1 fails with PyTorch's phrase.
TEST(CliTest, JoinWithControlFlowAcrossRanksAgreesUnderFindUnused) {
  const std::string run =
      "join --json --inputs 3,5,4 --batch-size 4 --model mlp:6,8,3,branch=rank1+iters --timeout 20";
  Result r = RunDdpkit(run + " --find-unused-parameters");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["models_identical"], true);
  r = RunDdpkit(run);
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(absl::StrContains(
      r.err,
      "Expected to have finished reduction in the prior iteration before starting a new one"))
      << r.err;
}

TEST(CliTest, JoinWithZeroShardsTheOptimizerAndStillAgrees) {
  Result r = RunDdpkit(
      "join --json --inputs 3,1,2,0 --batch-size 4 --model mlp:6,8,3 --optimizer zero-sgd "
      "--momentum 0.9");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["models_identical"], true);
  // 6*8 + 8 + 8*3 + 3 = 83 elements: 48 -> r0, 24 -> r1, 8 -> r2, 3 -> r3.
  EXPECT_EQ(report["elements_stepped"], nlohmann::json::parse("[48, 24, 8, 3]"));
  const auto& last = report["iterations"][2]["active_collectives"];
  EXPECT_TRUE(std::any_of(last.begin(), last.end(), [](const nlohmann::json& c) {
    return absl::StrContains(c.get<std::string>(), "BROADCAST float32[3] from 3");
  })) << last;  // rank 3 had no input at all, and still broadcast its shard
}

TEST(CliTest, JoinThrowModeStopsEveryRankInOneIteration) {
  Result r = RunDdpkit(
      "join --json --inputs 3,1,2 --batch-size 4 --model mlp:6,8,3 --throw-on-early-termination");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["stopped_at_iteration"], 1);
  EXPECT_EQ(report["iterations"].size(), 2u);
  EXPECT_EQ(report["iterations"][1]["completed"], false);
  EXPECT_EQ(report["authoritative_rank"], -1);  // post hooks never ran
  EXPECT_EQ(report["models_identical"], true);
}

TEST(CliTest, JoinWithoutJoinFailsWithTheDiagnosis) {
  Result r = RunDdpkit("join --inputs 3,1 --batch-size 4 --model mlp:6,8,3 --no-join --timeout 20");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "rank 1 has finished without issuing it")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "Drop --no-join")) << r.err;
  r = RunDdpkit("join --inputs 2,2 --batch-size 4 --model mlp:6,8,3 --no-join --json");
  ASSERT_EQ(r.status, 0) << r.err;  // even inputs need no Join
  EXPECT_EQ(nlohmann::json::parse(r.out)["models_identical"], true);
}

// SyncBatchNorm's allreduce cannot be shadowed: plain Join fails naming the collective and the
// rank that joined; throw mode stops every rank in the iteration the first ran out at.
TEST(CliTest, JoinWithSyncBatchNormNeedsThrowMode) {
  const std::string job =
      "join --inputs 2,1 --batch-size 2 --model resnet:1,1,1,1,width=2,in=1,classes=3,stem=small "
      "--sync-batchnorm --timeout 20";
  Result r = RunDdpkit(job);
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "sync_batch_norm")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "rank 1 ran out of inputs after 1 iterations")) << r.err;
  r = RunDdpkit(job + " --throw-on-early-termination --json");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["stopped_at_iteration"], 1);
  EXPECT_EQ(report["models_identical"], true);
}

TEST(CliTest, JoinReadsPerRankFilesAndSavesTheFinalWeights) {
  const std::string prefix = testing::TempDir() + "/join_data_" + std::to_string(::getpid());
  const int rows[] = {9, 4, 13};  // batch 4: 2, 1, 3 iterations
  for (int r = 0; r < 3; ++r) {
    ddpkit::Tensor x = ddpkit::Tensor::Empty({rows[r], 6});
    ddpkit::Tensor y = ddpkit::Tensor::Empty({rows[r]}, ddpkit::DType::kInt64);
    for (int64_t i = 0; i < x.numel(); ++i)
      x.data<float>()[i] = static_cast<float>((i * 37 + r) % 11) / 11.0f;
    for (int64_t i = 0; i < rows[r]; ++i) y.data<int64_t>()[i] = (i + r) % 3;
    ASSERT_TRUE(ddpkit::WriteSafetensors(prefix + ".rank" + std::to_string(r) + ".safetensors",
                                         {{"x", x}, {"y", y}})
                    .ok());
  }
  const std::string weights = prefix + ".weights.safetensors";
  Result r = RunDdpkit("join --json --data-per-rank " + prefix +
                       " --world-size 3 --batch-size 4 "
                       "--model mlp:6,8,3 --save-weights " +
                       weights);
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["inputs"], nlohmann::json::parse("[2, 1, 3]"));
  EXPECT_EQ(report["authoritative_rank"], 2);
  absl::StatusOr<ddpkit::SafetensorsFile> saved = ddpkit::ReadSafetensors(weights);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_NE(saved->Find("0.weight"), nullptr);
  r = RunDdpkit("join --data-per-rank " + prefix +
                " --world-size 4 --batch-size 4 --model mlp:6,8,3");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(absl::StrContains(r.err, prefix + ".rank3.safetensors")) << r.err;
}

// A rank whose file has no rows joins at once and shadows every iteration (as PyTorch's Join
// allows); `ddpkit train` has nothing to train on and says so.
TEST(CliTest, ARankWithNoDataJoinsAtOnceButTrainRefusesEmptyData) {
  const std::string prefix = testing::TempDir() + "/empty_rank_" + std::to_string(::getpid());
  const int rows[] = {8, 0, 12};  // batch 4: 2, 0, 3 iterations
  for (int r = 0; r < 3; ++r) {
    ddpkit::Tensor x = ddpkit::Tensor::Zeros({rows[r], 6});
    ddpkit::Tensor y = ddpkit::Tensor::Zeros({rows[r]}, ddpkit::DType::kInt64);
    ASSERT_TRUE(ddpkit::WriteSafetensors(prefix + ".rank" + std::to_string(r) + ".safetensors",
                                         {{"x", x}, {"y", y}})
                    .ok());
  }
  Result r = RunDdpkit("join --json --data-per-rank " + prefix +
                       " --world-size 3 --batch-size 4 --model mlp:6,8,3");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["inputs"], nlohmann::json::parse("[2, 0, 3]"));
  EXPECT_EQ(report["models_identical"], true);
  r = RunDdpkit("train --data " + prefix + ".rank1.safetensors --world-size 2 --model mlp:6,8,3");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "has no rows: there is nothing to train on")) << r.err;
}

TEST(CliTest, ContrastiveReportsTheCheckTheCurvesAndTheMemory) {
  const std::string dir = testing::TempDir() + "/contrastive_" + std::to_string(::getpid());
  Result r = RunDdpkit(
      "contrastive --json --world-size 2 --batch-size 4 --steps 3 --layout local "
      "--gather sum --out " +
      dir);
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["world_size"], 2);
  ASSERT_EQ(report["gradient_check"].size(), 1u);
  EXPECT_EQ(report["gradient_check"][0]["gather"], "sum");
  EXPECT_LT(report["gradient_check"][0]["encoder_rel_error"].get<double>(), 1e-12);
  ASSERT_EQ(report["training"].size(), 2u);  // the single-process reference, then local + sum
  EXPECT_EQ(report["training"][0]["gather"], "single-process");
  EXPECT_EQ(report["training"][1]["losses"].size(), 3u);
  EXPECT_EQ(report["logit_memory"][0]["elements_per_rank"],
            64);  // 2·b·B = 2·4·8
  for (const char* file : {"/curves.csv", "/curves.svg"}) {
    FILE* f = std::fopen((dir + file).c_str(), "r");
    ASSERT_NE(f, nullptr) << file;
    std::fclose(f);
  }
}

// --gather and --layout take lists. A run of every mode draws only the naive gather, the fix
// and the reference; a run of a few chosen modes draws each of them.
TEST(CliTest, ContrastiveDrawsTheStoryOrTheChosenModes) {
  const std::string dir = testing::TempDir() + "/contrastive_list_" + std::to_string(::getpid());
  auto svg_of = [&](const std::string& flags) {
    Result r =
        RunDdpkit("contrastive --world-size 2 --batch-size 4 --steps 2 " + flags + " --out " + dir);
    EXPECT_EQ(r.status, 0) << flags << ": " << r.err;
    std::ifstream in(dir + "/curves.svg");
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  std::string svg = svg_of("");
  EXPECT_TRUE(absl::StrContains(svg, "local + slice: the naive GatherLayer")) << svg;
  EXPECT_TRUE(absl::StrContains(svg, "local + sum: the fix")) << svg;
  EXPECT_TRUE(absl::StrContains(svg, "one process, whole batch (reference)")) << svg;
  EXPECT_FALSE(absl::StrContains(svg, "global + none")) << svg;
  EXPECT_TRUE(absl::StrContains(svg, "the run's 8 other modes are in curves.csv")) << svg;

  svg = svg_of("--layout global --gather slice,avg,none");
  for (const char* mode : {"global + slice", "global + avg", "global + none"}) {
    EXPECT_TRUE(absl::StrContains(svg, mode)) << mode;
  }
  EXPECT_FALSE(absl::StrContains(svg, "other modes")) << svg;

  for (const char* flags : {"--gather slice,slice", "--gather slice,", "--layout local,diag"}) {
    Result r = RunDdpkit(std::string("contrastive ") + flags);
    EXPECT_EQ(r.status, 2) << flags << ": " << r.err;
    EXPECT_EQ(Lines(r.err), 1) << flags << ": " << r.err;
  }
  std::filesystem::remove_all(dir);
}

// --device cuda with no usable GPU: one line on the Fail path (exit 1) saying so, not a crash.
TEST(CliTest, ContrastiveOnAMissingGpuSaysSo) {
  if (ddpkit::cuda::DeviceCount() > 0) GTEST_SKIP() << "a GPU is visible";
  Result r = RunDdpkit("contrastive --device cuda --world-size 2 --batch-size 2 --steps 1");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_TRUE(absl::StartsWith(r.err, "ddpkit contrastive: cuda:0 is not usable")) << r.err;
}

// Recompute under DDP as a user meets it: the error text, then the two fixes in the text table.
TEST(CliTest, RecomputeShowsTheErrorAndBothFixes) {
  Result r = RunDdpkit("recompute --world-size 2 --blocks 2 --width 8 --batch-size 4 --steps 3");
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* text :
       {"1. plain DDP (find_unused_parameters=true): stopped at the first backward", "('blocks.",
        "marked ready twice", "static_graph     ", "no_sync_fused    ",
        "final parameters are bitwise equal", "checkpointing 2 blocks saves"}) {
    EXPECT_TRUE(absl::StrContains(r.out, text)) << text << " not in\n" << r.out;
  }
  // --help shows the defaults recompute uses, not the shared flags' own.
  r = RunDdpkit("recompute --help");
  EXPECT_TRUE(absl::StrContains(r.out + r.err, "--steps (default: 20)")) << r.out << r.err;
  r = RunDdpkit("recompute --json --world-size 2 --blocks 1 --width 4 --batch-size 2 --steps 2");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json report = nlohmann::json::parse(r.out);
  ASSERT_EQ(report["runs"].size(), 3u);
  EXPECT_EQ(report["runs"][0]["ok"], false);
  EXPECT_EQ(report["runs"][2]["bitwise_equal_to_static_graph"], true);
}

// The readers of --trace files and flight-recorder dumps: one line and exit 2 for a wrong
// command line, exit 1 naming the file when it cannot be read.
// The DDP paper's three experiments on a small model: every row there, each in its place, and
// the picture written.
TEST(CliTest, BenchPaperRunsTheThreeExperiments) {
  const std::string dir = testing::TempDir() + "/bench_paper_" + std::to_string(::getpid());
  Result r = RunDdpkit(
      "bench paper --world-size 2 --model mlp:16,32,32,4 --batch-size 8 --iters 2 "
      "--warmup-iters 1 --bucket-caps 0,1 --sync-every 1,2,4 --json --out " +
      dir);
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json report = nlohmann::json::parse(r.out);
  ASSERT_EQ(report["breakdown"].size(), 2u);
  EXPECT_EQ(report["breakdown"][0]["mode"], "overlap");
  EXPECT_EQ(report["breakdown"][1]["mode"], "no overlap");
  for (const auto& b : report["breakdown"]) {
    EXPECT_GT(b["step_ms"].get<double>(), 0) << b;
    EXPECT_LE(b["step_min_ms"].get<double>(), b["step_ms"].get<double>()) << b;
    EXPECT_GE(b["step_max_ms"].get<double>(), b["step_ms"].get<double>()) << b;
  }
  for (const auto& p : report["caps"]) {
    EXPECT_LE(p["step_min_ms"].get<double>(), p["step_ms"].get<double>()) << p;
    EXPECT_GE(p["step_max_ms"].get<double>(), p["step_ms"].get<double>()) << p;
  }
  for (const auto& p : report["sync"]) {
    EXPECT_LE(p["iteration_min_ms"].get<double>(), p["iteration_ms"].get<double>()) << p;
    EXPECT_GE(p["iteration_max_ms"].get<double>(), p["iteration_ms"].get<double>()) << p;
  }
  // Progress on stderr, one line per measurement: 2 breakdowns, 2 caps, 3 values of K.
  EXPECT_TRUE(absl::StrContains(r.err, "bench paper: 1/7 latency breakdown")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "bench paper: 7/7 an allreduce every 4")) << r.err;
  ASSERT_EQ(report["caps"].size(), 2u);
  EXPECT_EQ(report["caps"][0]["buckets"], 6);  // cap 0: one bucket per parameter tensor
  EXPECT_EQ(report["caps"][1]["buckets"], 1);  // 1 MB holds the whole 1.8 KB model
  ASSERT_EQ(report["sync"].size(), 3u);
  EXPECT_EQ(report["sync"][0]["speedup"], 1.0);
  EXPECT_EQ(report["sync"][2]["sync_every"], 4);
  std::string svg;
  {
    std::ifstream in(dir + "/paper.svg");
    svg.assign(std::istreambuf_iterator<char>(in), {});
  }
  for (const char* title : {"1. Where a step goes", "2. Step time vs bucket size",
                            "3. Skipping synchronisation", "K = 4", "range of the timed steps"}) {
    EXPECT_TRUE(absl::StrContains(svg, title)) << title;
  }
  std::filesystem::remove_all(dir);
}

TEST(CliTest, TraceAndFrUsageErrors) {
  for (const char* args : {"trace", "trace stats", "trace frobnicate t.json", "trace svg t.json",
                           "trace svg t.json --out x.svg --iterations 3:1", "fr", "fr analyze",
                           "fr look /tmp", "bench allreduce --trace t.json"}) {
    Result r = RunDdpkit(args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.err;
    EXPECT_EQ(Lines(r.err), 1) << args << ": " << r.err;
  }
  Result r = RunDdpkit("trace stats /nonexistent/t.json");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "/nonexistent/t.json")) << r.err;
  r = RunDdpkit("fr analyze /nonexistent/dir");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "/nonexistent/dir")) << r.err;
}

// `train --trace`, then the trace read back: stats as JSON, a timeline picture.
TEST(CliTest, TraceThenStatsAndSvg) {
  const std::string base = testing::TempDir() + "/cli_trace_" + std::to_string(::getpid());
  Result r = RunDdpkit("train --world-size 2 --steps 3 --batch-size 8 --trace " + base + ".json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "trace written to " + base + ".json")) << r.out;
  r = RunDdpkit("trace stats " + base + ".json --json");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json stats = nlohmann::json::parse(r.out);
  EXPECT_EQ(stats["ranks"].size(), 2u);
  EXPECT_EQ(stats["iterations"].size(), 6u);  // 3 iterations x 2 ranks
  r = RunDdpkit("trace svg " + base + ".json --out " + base + ".svg --iterations 0:2");
  ASSERT_EQ(r.status, 0) << r.err;
  FILE* svg = std::fopen((base + ".svg").c_str(), "r");
  ASSERT_NE(svg, nullptr);
  std::fclose(svg);
  // Without --iterations: iterations 1 and 2, the warm-up left out and said so.
  r = RunDdpkit("trace svg " + base + ".json --out " + base + ".svg");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "iteration 0, the warm-up, left out")) << r.out;
  std::ifstream drawn(base + ".svg");
  const std::string text((std::istreambuf_iterator<char>(drawn)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(absl::StrContains(text, "iterations 1 to 2")) << text.substr(0, 400);
  std::remove((base + ".json").c_str());
  std::remove((base + ".svg").c_str());
}

// PyTorch's profiler traces: a folder of them, or the files; a file that is not one refused in
// one line.
TEST(CliTest, TraceStatsReadsPyTorchProfilerTraces) {
  const std::string dir = std::string(DDPKIT_TESTDATA_DIR) + "/torch_traces/world2";
  Result r = RunDdpkit("trace stats " + dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "pytorch profiler, 2 rank(s), gloo")) << r.out;
  r = RunDdpkit("trace stats " + dir + "/rank0.json " + dir + "/rank1.json --json --torch-plan " +
                dir + "/ddp_logging.rank0.json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["iterations"].size(), 6u);  // 3 iterations x 2 ranks
  r = RunDdpkit("trace stats " + dir + "/rank0.json " + dir + "/ddp_logging.rank0.json");
  EXPECT_EQ(r.status, 2);  // bad input
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "ddp_logging.rank0.json: not a Chrome trace")) << r.err;
}

// PyTorch 2.15's pickle dumps of a job where rank 1 allreduced another shape: the verdict, the
// stack that issued it, and every collective's verdict.
TEST(CliTest, FrAnalyzeReadsPyTorchsPickleDumps) {
  const std::string dir = std::string(DDPKIT_TESTDATA_DIR) + "/torch_fr/torch-2.15/size/pickle";
  Result r = RunDdpkit("fr analyze " + dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out,
                                "3 of 3 rank(s) left a dump (PyTorch dump version 2.10 "
                                "(PyTorch 2.9-2.15))"))
      << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "diagnosis: ranks disagree at seq 5 (size mismatch)"))
      << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "  issued at (rank 1):\n    all_reduce at ")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out,
                                "collectives compared (as PyTorch's analyser): 10: 9 fully "
                                "matched, 1 size mismatch"))
      << r.out;
  r = RunDdpkit("fr analyze " + dir + " --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["collectives"].size(), 10u);
  EXPECT_EQ(j["collectives"][4]["verdict"], "size_mismatch");
  EXPECT_EQ(j["findings"][0]["verdict"], "size_mismatch");
}

// A join without Join fails; its dumps say which rank never issued what.
TEST(CliTest, FrAnalyzeNamesTheRankThatLeft) {
  std::filesystem::remove_all(kDumpDir);  // an earlier test's failed job may have dumped here
  Result r = RunDdpkit("join --inputs 3,1 --batch-size 4 --model mlp:6,8,3 --no-join");
  ASSERT_EQ(r.status, 1) << r.err;
  r = RunDdpkit("fr analyze " + kDumpDir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "diagnosis: rank 1 never issued BROADCAST")) << r.out;
  r = RunDdpkit("fr analyze " + kDumpDir + " --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["findings"][0]["kind"], "missing");
  std::filesystem::remove_all(kDumpDir);
}

// --check: 0 when every verdict holds, 3 with one line per failed verdict, 1 when the job
// itself failed. A failed verdict without --check is printed but exits 0.
TEST(CliCheckTest, JoinExitsThreeOnlyForAFailedVerdict) {
  const std::string join = "join --inputs 5,6,3,8 --batch-size 8 --reference one-process ";
  Result r = RunDdpkit(join + "--check");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err,
                                "join --check: passed: the final models are identical on "
                                "every rank; DDP equals one process"))
      << r.err;
  // PyTorch's allreduce hook divides by the world size whatever divide_by_initial_world_size
  // says: with it, DDP is not the one process on the active ranks' rows the flag promises.
  const std::string hooked = join + "--divide-by-initial-world-size false --comm-hook allreduce ";
  r = RunDdpkit(hooked + "--check");
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "join --check: FAILED: DDP differs from one process"))
      << r.err;
  r = RunDdpkit(hooked);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "DIFFERENT")) << r.out;
  // With --json the verdict goes to stderr; stdout stays one JSON report.
  r = RunDdpkit(hooked + "--check --json");
  EXPECT_EQ(r.status, 3) << r.err;
  nlohmann::json report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["reference_agrees"], false);
  EXPECT_TRUE(report["reference_max_abs_diff"].is_number_float());
  // A run that fails is an error, not a verdict.
  r = RunDdpkit("join --inputs 2,4 --no-join --check --timeout 5");
  EXPECT_EQ(r.status, 1) << r.err;
}

TEST(CliCheckTest, TrainChecksTheModelsAndTheReference) {
  Result r = RunDdpkit(
      "train --world-size 2 --steps 6 --grad-accum 2 --batch-size 8 --check --reference "
      "one-process");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "final models identical on all ranks: yes")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.err, "train --check: passed")) << r.err;
  EXPECT_EQ(RunDdpkit("train --steps 1 --reference two").status, 2);
  r = RunDdpkit("train --steps 1 --reference one-process --model resnet:1,1,1,1,width=8,in=3");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "BatchNorm")) << r.err;
}

// Every --json report: a schema version, the report's name, numbers as JSON numbers (64-bit
// integers too, which proto3's mapping would print as strings).
TEST(CliCheckTest, JsonReportsCarryASchemaVersionAndNumbersAsNumbers) {
  Result r = RunDdpkit("train --json --steps 2 --batch-size 4");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::ordered_json report = nlohmann::ordered_json::parse(r.out);
  EXPECT_EQ(report.begin().key(), "schema_version");
  EXPECT_EQ(report["schema_version"], 1);
  EXPECT_EQ(report["report"], "TrainReport");
  EXPECT_TRUE(report["num_parameters"].is_number_integer()) << report["num_parameters"];
  EXPECT_TRUE(report["seed"].is_number_integer()) << report["seed"];
  EXPECT_TRUE(report["ddp"]["initial_buckets"][0]["bytes"].is_number_integer());
  EXPECT_FALSE(report.contains("models_identical"));  // only with --check
}

// fr analyze --plan: a PyTorch DDP job's calls named by bucket, its hang read as uneven inputs.
TEST(CliCheckTest, FrAnalyzeWithAPlanReadsAPyTorchHangAsUnevenInputs) {
  const std::string job = std::string(DDPKIT_TESTDATA_DIR) + "/torch_fr_ddp/torch-2.15/uneven";
  Result r = RunDdpkit("fr analyze " + job + "/json --plan " + job + "/plan.json");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "(DDP bucket 0 of iteration 3: 4.bias, 4.weight")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "uneven inputs (rank 2 ran out of batches)")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "bucket 1, iter 2")) << r.out;
  r = RunDdpkit("fr analyze " + job + "/json --plan " + job + "/missing.json");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(Lines(r.err), 1) << r.err;
}

}  // namespace
