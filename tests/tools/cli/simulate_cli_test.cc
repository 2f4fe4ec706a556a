// `ddpkit simulate` run as a user would: text, JSON, a timeline, one-line errors, and speed.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/run_command.h"

namespace {

ddpkit::testing_util::CommandResult Simulate(const std::string& args) {
  return ddpkit::testing_util::RunCommand(std::string(DDPKIT_BINARY_DIR) + "/bin/ddpkit simulate " +
                                          args);
}

TEST(SimulateCliTest, JsonCoversEveryWorldSizeAndTheCapSweep) {
  auto r = Simulate("--model mlp:64,256,256,10 --world-size 2,4,1024 --sweep-caps --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["worlds"].size(), 3u);
  EXPECT_EQ(j["worlds"][2]["world_size"], 1024);
  EXPECT_EQ(j["sweeps"].size(), 3u);
  EXPECT_EQ(j["grad_ready_order"], "observed");
  for (const auto& p : j["worlds"]) {
    EXPECT_NEAR(p["comm_ms"].get<double>(),
                p["exposed_ms"].get<double>() + p["overlapped_ms"].get<double>(), 1e-9);
    EXPECT_GE(p["step_ms"].get<double>(), p["compute_ms"].get<double>());
  }
  EXPECT_LT(j["simulate_ms"].get<double>(), 1000);
}

// A sweep where every cap gives the same step says the cap does not matter instead of
// crowning the smallest; one with ties beside a winner names them; a step that is nearly all
// communication says why nothing overlaps.
TEST(SimulateCliTest, CapTiesAreNamedAndAllCommunicationIsExplained) {
  auto r = Simulate("--model mlp:784,2048,2048,10 --world-size 2 --sweep-caps --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const nlohmann::json& sweep = j["sweeps"][0];
  for (const auto& cap : sweep["tied_caps_mb"]) {
    EXPECT_NE(cap.get<double>(), sweep["best_bucket_cap_mb"].get<double>());
    bool found = false;
    for (const auto& p : sweep["points"]) {
      if (p["bucket_cap_mb"] == cap) {
        found = true;
        EXPECT_LE(p["iteration_ms"].get<double>(), sweep["best_step_ms"].get<double>() * 1.001);
      }
    }
    EXPECT_TRUE(found) << cap;
  }
  EXPECT_GE(sweep["tied_caps_mb"].size(), 1u) << sweep;  // 25 ties 50, 100 and 200 here

  r = Simulate("--model mlp:784,2048,2048,10 --world-size 2 --sweep-caps");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("tied within 0.1% by"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("note: compute is"), std::string::npos) << r.out;

  // One parameter tensor: every cap makes the same single bucket.
  r = Simulate("--model mlp:64,10,bias=0 --world-size 2 --sweep-caps");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("every bucket_cap_mb gives"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("best bucket_cap_mb"), std::string::npos) << r.out;

  r = Simulate("--params " + std::string(DDPKIT_TESTDATA_DIR) +
               "/plans/resnet50.json --world-size 64 --sweep-caps");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.find("note: compute is"), std::string::npos) << r.out;
}

TEST(SimulateCliTest, TextAndTimeline) {
  const std::string svg = (std::filesystem::temp_directory_path() / "ddpkit_sim_test.svg").string();
  auto r = Simulate(
      "--model mlp:64,256,256,10 --world-size 8 --network dgx-a100-ib200 "
      "--hook powersgd:2 --no-sync-every 4 --svg " +
      svg);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("powersgd:2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("timeline written to"), std::string::npos);
  std::ifstream in(svg);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("<svg"), std::string::npos);
  EXPECT_NE(text.find("rebuild"), std::string::npos);
}

TEST(SimulateCliTest, RealArchitecturesUpToThousandRanksInUnderASecond) {
  for (const char* table : {"resnet50", "bert_base", "gpt2"}) {
    auto r = Simulate(std::string("--param-table ") + DDPKIT_TESTDATA_DIR + "/simulate/" + table +
                      ".txt --world-size 2,8,64,256,1024 --sweep-caps --network dgx-a100-ib200 "
                      "--json");
    ASSERT_EQ(r.status, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["grad_ready_order"], "estimated: reverse registration order");
    EXPECT_EQ(j["sweeps"].size(), 5u);
    EXPECT_LT(j["simulate_ms"].get<double>(), 1000) << table;
  }
}

// Every committed plan file (tools/scripts/export_ddp_plan.py): its FLOPs, its observed order.
TEST(SimulateCliTest, EveryCommittedPlanFileUpToThousandRanksInUnderASecond) {
  const std::filesystem::path dir = std::filesystem::path(DDPKIT_TESTDATA_DIR) / "plans";
  int files = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;  // plans/2.15/ holds PyTorch 2.15's
    auto r = Simulate("--params " + entry.path().string() +
                      " --world-size 2,8,64,256,1024 --sweep-caps --json");
    ASSERT_EQ(r.status, 0) << entry.path() << ": " << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["grad_ready_order"], "observed") << entry.path();
    EXPECT_NE(j["compute"].get<std::string>().find("the plan file's FLOPs"), std::string::npos)
        << j["compute"];
    EXPECT_GT(j["backward_ms"].get<double>(), 0) << entry.path();
    EXPECT_EQ(j["sweeps"].size(), 5u);
    EXPECT_LT(j["simulate_ms"].get<double>(), 1000) << entry.path();
    ++files;
  }
  EXPECT_GE(files, 7);
}

// A plan file without FLOPs (parameters only) is simulated on FLOPs estimated from its shapes,
// and the report says so.
TEST(SimulateCliTest, APlanFileWithoutFlopsIsAnEstimate) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "ddpkit_sim_params_only.json").string();
  std::ofstream(path) << R"({"format": "ddpkit-plan/1", "model": "m:f", "input_shape": null,
    "parameters": [{"name": "w", "shape": [256, 64], "dtype": "float32", "requires_grad": true},
                   {"name": "b", "shape": [256], "dtype": "float32", "requires_grad": true}]})";
  auto r = Simulate("--params " + path + " --world-size 2");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("FLOPs ESTIMATED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("reverse registration order"), std::string::npos) << r.out;
}

// --calibrate from the one short run a user has: ddpkit's own trace of `ddpkit train`, and a
// PyTorch DDP job's profiler traces with its logging data naming the gradients.
TEST(SimulateCliTest, CalibratesFromATrainRunAndFromPyTorchProfilerTraces) {
  const std::string trace =
      (std::filesystem::temp_directory_path() / "ddpkit_sim_calibrate.json").string();
  auto train = ddpkit::testing_util::RunCommand(
      std::string(DDPKIT_BINARY_DIR) +
      "/bin/ddpkit train --model mlp:64,256,256,10 --batch-size 32 --steps 8 --backend threads "
      "--world-size 2 --trace " +
      trace);
  ASSERT_EQ(train.status, 0) << train.err;
  auto r = Simulate("--model mlp:64,256,256,10 --batch-size 32 --world-size 2,64 --calibrate " +
                    trace + " --json");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_NE(j["calibration"].get<std::string>().find("an allreduce alone"), std::string::npos);
  EXPECT_NE(j["compute"].get<std::string>().find("each its slowest of 2 ranks"), std::string::npos)
      << j["compute"];
  for (const char* rate : {"interference_comm_rate", "interference_compute_rate"}) {
    EXPECT_GT(j[rate].get<double>(), 0) << rate;
    EXPECT_LE(j[rate].get<double>(), 1) << rate;
  }
  // The run itself predicted again, beside its measured steps: the model's own error.
  EXPECT_GT(j["replay_iterations"].get<int>(), 0) << r.out;
  EXPECT_GT(j["replay_measured_ms"].get<double>(), 0);
  EXPECT_GT(j["replay_predicted_ms"].get<double>(), 0);
  EXPECT_GE(j.value("replay_spread", 0.0), 0);
  // --interference replaces what was measured; the text shows what was used.
  r = Simulate("--model mlp:64,256,256,10 --batch-size 32 --world-size 2 --calibrate " + trace +
               " --interference comm=0.25,compute=0.5");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("at 0.25x its speed, backward beside a collective at 0.50x"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("slowed"), std::string::npos) << r.out;
  // Replayed with rates the run did not have, it would not be the run: the report says so.
  EXPECT_NE(r.out.find("not replayed: --network or --interference"), std::string::npos) << r.out;
  r = Simulate("--model mlp:64,256,256,10 --batch-size 32 --world-size 2 --calibrate " + trace);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("the calibration run predicted again (its "), std::string::npos) << r.out;

  // From a run without find_unused_parameters its graph search is not priced, and says so; a run
  // with it traces the search ("unused search"), and the prediction carries it.
  r = Simulate("--model mlp:64,256,256,10 --batch-size 32 --world-size 2 --calibrate " + trace +
               " --find-unused-parameters --json");
  ASSERT_EQ(r.status, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_NE(j["ddp_options"].get<std::string>().find("NOT PRICED"), std::string::npos);
  train = ddpkit::testing_util::RunCommand(
      std::string(DDPKIT_BINARY_DIR) +
      "/bin/ddpkit train --model mlp:64,256,256,10 --batch-size 32 --steps 8 --backend threads "
      "--world-size 2 --find-unused-parameters --trace " +
      trace);
  ASSERT_EQ(train.status, 0) << train.err;
  r = Simulate("--model mlp:64,256,256,10 --batch-size 32 --world-size 2 --calibrate " + trace +
               " --find-unused-parameters --json");
  ASSERT_EQ(r.status, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["unused_search_ms"].get<double>(), 0);
  EXPECT_NE(j["ddp_options"].get<std::string>().find("(measured)"), std::string::npos)
      << j["ddp_options"];

  const std::string torch = std::string(DDPKIT_TESTDATA_DIR) + "/torch_traces/world2";
  r = Simulate("--model mlp:256,512,512,512,10 --batch-size 32 --world-size 2 --calibrate " +
               torch + " --torch-plan " + torch + "/ddp_logging.rank0.json --json");
  ASSERT_EQ(r.status, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_NE(j["compute"].get<std::string>().find("calibrated"), std::string::npos);
  // Without the plan PyTorch's gradients have no names: one line says what to add.
  r = Simulate("--model mlp:256,512,512,512,10 --batch-size 32 --world-size 2 --calibrate " +
               torch);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--torch-plan"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  // A trace that is not there is named, in one line.
  r = Simulate("--calibrate /nonexistent/t.json");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("/nonexistent/t.json"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// A comm hook's own work: estimated (and said to be) from a run without the hook; measured from
// a run with it, whose trace names the hook (its ddp_options) and times its work around each
// bucket's collectives.
TEST(SimulateCliTest, AHooksWorkIsMeasuredFromARunWithIt) {
  const std::string trace =
      (std::filesystem::temp_directory_path() / "ddpkit_sim_hook.json").string();
  const std::string model = "--model mlp:64,256,256,10 --batch-size 32 --world-size 2 ";
  auto train = [&](const std::string& flags) {
    return ddpkit::testing_util::RunCommand(std::string(DDPKIT_BINARY_DIR) + "/bin/ddpkit train " +
                                            model + "--steps 8 --backend threads --trace " + trace +
                                            flags);
  };
  auto run = train("");
  ASSERT_EQ(run.status, 0) << run.err;
  auto r = Simulate(model + "--calibrate " + trace + " --hook fp16 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_NE(j["ddp_options"].get<std::string>().find("ESTIMATED"), std::string::npos)
      << j["ddp_options"];
  run = train(" --comm-hook fp16");
  ASSERT_EQ(run.status, 0) << run.err;
  const nlohmann::json written = nlohmann::json::parse(std::ifstream(trace));
  EXPECT_EQ(written["otherData"]["ddpkit"]["ranks"][0]["ddp_options"]["comm_hook"], "fp16");
  r = Simulate(model + "--calibrate " + trace + " --hook fp16 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_NE(j["ddp_options"].get<std::string>().find("measured from the calibration run"),
            std::string::npos)
      << j["ddp_options"];
  EXPECT_NE(j["calibration"].get<std::string>().find("the run's fp16 comm hook"), std::string::npos)
      << j["calibration"];
  EXPECT_GT(j["replay_iterations"].get<int>(), 0) << r.out;
  // The same trace asked about no hook, or another one, says what it rests on.
  r = Simulate(model + "--calibrate " + trace + " --json");
  ASSERT_EQ(r.status, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_NE(j["ddp_options"].get<std::string>().find("the calibration run had the fp16 hook"),
            std::string::npos);
  EXPECT_NE(j["replay_note"].get<std::string>().find("give --hook fp16 to replay it"),
            std::string::npos)
      << j["replay_note"];
  r = Simulate(model + "--calibrate " + trace + " --hook powersgd:1 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(nlohmann::json::parse(r.out)["ddp_options"].get<std::string>().find("not this one"),
            std::string::npos);
}

// One run prices the allreduce at its own buckets' sizes only: a cap whose buckets lie beyond
// them is said to be extrapolated, and a second run at that cap is read beside the first, every
// iteration of both. (Whether the second run's bucket is then priced depends on its timing — on
// busy cores its one allreduce can wait for a rank still in backward in every iteration — so
// CalibrateTest.ASecondRunPricesItsSizesWhereTheyRanAfterEveryRanksBackward holds that part.)
TEST(SimulateCliTest, ASecondRunAtAnotherCapPricesTheSizesTheFirstLacks) {
  const std::string dir = std::filesystem::temp_directory_path().string();
  const std::string a = dir + "/ddpkit_sim_runs_a.json", b = dir + "/ddpkit_sim_runs_b.json";
  const std::string model = "--model mlp:784,1024,1024,10 --batch-size 8 --world-size 2 ";
  auto train = [&](const std::string& trace, const std::string& flags) {
    return ddpkit::testing_util::RunCommand(std::string(DDPKIT_BINARY_DIR) + "/bin/ddpkit train " +
                                            model + "--steps 8 --backend threads --trace " + trace +
                                            flags);
  };
  auto run = train(a, "");  // buckets of 4.24 and 3.21 MB
  ASSERT_EQ(run.status, 0) << run.err;
  run = train(b, " --bucket-cap-mb 25");  // one bucket of 7.45 MB
  ASSERT_EQ(run.status, 0) << run.err;
  auto r = Simulate(model + "--bucket-cap-mb 25 --calibrate " + a + " --json");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_NE(j.value("price_note", "").find("bucket_cap_mb 25 plans buckets of 7.45 MB"),
            std::string::npos)
      << j.value("price_note", "");
  r = Simulate(model + "--bucket-cap-mb 25 --calibrate " + a + "," + b + " --json");
  ASSERT_EQ(r.status, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["replay_iterations"].get<int>(), 7) << r.out;  // both runs' iterations replayed
  // The text says it too.
  r = Simulate(model + "--bucket-cap-mb 25 --calibrate " + a);
  EXPECT_NE(r.out.find("  price: bucket_cap_mb 25 plans"), std::string::npos) << r.out;
  // A run of another job is refused, naming what differs.
  run = train(b, " --find-unused-parameters");
  ASSERT_EQ(run.status, 0) << run.err;
  r = Simulate(model + "--calibrate " + a + "," + b);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("find_unused_parameters true against false"), std::string::npos) << r.err;
}

// A ResNet (or GPT) spec has no FLOP count: its times come from a trace of it, and without one
// the error says how to make one.
TEST(SimulateCliTest, AResNetSpecIsSimulatedFromItsOwnTrace) {
  const std::string spec = "resnet:1,1,1,1,width=8,in=1,classes=10,stem=small";
  const std::string trace =
      (std::filesystem::temp_directory_path() / "ddpkit_sim_resnet.json").string();
  auto train = ddpkit::testing_util::RunCommand(
      std::string(DDPKIT_BINARY_DIR) + "/bin/ddpkit train --model " + spec +
      " --batch-size 8 --steps 6 --backend threads --world-size 2 --trace " + trace);
  ASSERT_EQ(train.status, 0) << train.err;
  auto r = Simulate("--model " + spec + " --batch-size 8 --world-size 2,64 --calibrate " + trace +
                    " --sweep-caps --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["grad_ready_order"], "observed");
  EXPECT_GT(j["worlds"][0]["step_ms"].get<double>(), 0);
  r = Simulate("--model " + spec + " --world-size 2");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--calibrate TRACE"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(SimulateCliTest, BadFlagsAreOneLineUsageErrors) {
  for (const char* args :
       {"--world-size 0", "--world-size 2,x", "--network mesh", "--compute fast", "--hook int8",
        "--model nonsense", "--interference comm=2", "--interference speed=0.5"}) {
    auto r = Simulate(args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
  }
  for (const auto& [args, flag] : std::vector<std::pair<std::string, std::string>>{
           {"--round-robin-groups 0", "--round-robin-groups"},
           {"--round-robin-groups 17", "--round-robin-groups"},
           {"--round-robin-groups 2 --collective-share 0", "--collective-share"},
           {"--round-robin-groups 2 --collective-share 1.5", "--collective-share"}}) {
    auto r = Simulate("--model mlp:8,8 --world-size 2 " + args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
    EXPECT_NE(r.err.find(flag), std::string::npos) << args << ": " << r.err;
  }
}

// Round-robin groups (the DDP paper's §5.4): where one collective fills only part of the link,
// K groups run K at once and shorten the exposed tail; where it fills the link, they only
// split it, and the step is one group's.
TEST(SimulateCliTest, RoundRobinGroupsHelpOnlyWhereOneCollectiveLeavesTheLinkIdle) {
  const std::string job =
      "--model mlp:784,2048,2048,2048,10 --batch-size 64 --compute gflops=100 --network eth10 "
      "--world-size 8 --bucket-cap-mb 5 --json ";
  auto step = [&](const std::string& extra) {
    auto r = Simulate(job + extra);
    EXPECT_EQ(r.status, 0) << extra << ": " << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["round_robin_groups"].get<int>(), extra.empty() ? 1 : 2) << extra;
    return j["worlds"][0]["exposed_ms"].get<double>();
  };
  const double one = step("");
  ASSERT_GT(one, 1) << "the case must leave a tail to shorten";
  EXPECT_NEAR(step("--round-robin-groups 2"), one, 0.01 * one);
  EXPECT_LT(step("--round-robin-groups 2 --collective-share 0.5"), 0.9 * one);
  auto text = Simulate(
      "--model mlp:784,2048,2048,2048,10 --world-size 8 --round-robin-groups 2 "
      "--collective-share 0.5");
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("streams: 2 round-robin groups"), std::string::npos) << text.out;
}

// A real calibration whose rates replay it 12.1% short: its steps spread 38% (an MLP on 2 gloo
// ranks over a 25 Gb/s namespace link, validation batch of 2026-12-06). The rates closest to its
// steps one iteration at a time replay its median step further off, so the measured ones stand
// and the summary says what was tried.
TEST(SimulateCliTest, ARefitThatReplaysTheRunFurtherOffIsNotTaken) {
  const std::string trace =
      std::string(DDPKIT_TESTDATA_DIR) + "/simulate/mlp_gloo2_25gbit_noisy.json";
  auto r = Simulate(
      "--model mlp:784,1024,1024,1024,10 --batch-size 64 --world-size 2 --calibrate " + trace);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("replayed the run -12.1% off its measured step; the rates closest to its "
                       "steps one iteration at a time (0.60x and 1.00x) replay its median step "
                       "-13.8% off, no closer, so they stand"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("backward beside a collective at 0.97x"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("-12.1% — the model's error on the run it learned from"), std::string::npos)
      << r.out;
}

// The same noisy run: 18 steps of 39 to 156 ms, the middle two 60.5 and 63.3, an optimizer of
// 0.5 to 28 ms beside them. A prediction at the run's own options is its self-check's replay,
// and both take the median as the measured step does (tools/scripts/trace_step_ms.py: the mean
// of the middle two), the optimizer's noise left out of which iteration that is.
TEST(SimulateCliTest, APredictionAtTheRunsOwnOptionsIsItsReplayAtTheMeasuredMedian) {
  const std::string trace =
      std::string(DDPKIT_TESTDATA_DIR) + "/simulate/mlp_gloo2_25gbit_noisy.json";
  auto r = Simulate(
      "--model mlp:784,1024,1024,1024,10 --batch-size 64 --world-size 2 --json "
      "--calibrate " +
      trace);
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_NEAR(j["replay_measured_ms"].get<double>(), 61.9095485, 1e-6);  // trace_step_ms.py's
  const double predicted =
      j["worlds"][0]["step_ms"].get<double>() - j["optimizer_ms"].get<double>();
  EXPECT_NEAR(predicted, j["replay_predicted_ms"].get<double>(), 1e-6);
}

// Two groups' collectives at once each get a row of the picture's comm lane; with one group
// they run in turn and one row holds them.
TEST(SimulateCliTest, RoundRobinTimelineDrawsCollectivesAtOnceInRowsOfTheirOwn) {
  const std::string svg = (std::filesystem::temp_directory_path() / "ddpkit_rr_test.svg").string();
  const std::string job =
      "--model mlp:784,2048,2048,2048,10 --batch-size 64 --compute gflops=100 --network eth10 "
      "--world-size 8 --bucket-cap-mb 5 --svg " +
      svg + " ";
  auto picture = [&](const std::string& extra) {
    auto r = Simulate(job + extra);
    EXPECT_EQ(r.status, 0) << extra << ": " << r.err;
    std::ifstream in(svg);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const std::string one = picture("");
  EXPECT_NE(one.find(">comm<"), std::string::npos);
  EXPECT_EQ(one.find(">comm 2<"), std::string::npos);
  const std::string two = picture("--round-robin-groups 2 --collective-share 0.5");
  EXPECT_NE(two.find(">comm 2<"), std::string::npos);
  EXPECT_EQ(two.find(">comm 3<"), std::string::npos);
  std::filesystem::remove(svg);
}

// The picture goes to its path whole or not at all; a path that cannot be written is named.
TEST(SimulateCliTest, TimelineIntoAMissingFolderIsAnErrorNamingIt) {
  auto r = Simulate("--model mlp:64,256,10 --world-size 2 --svg /nonexistent-ddpkit-dir/t.svg");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("/nonexistent-ddpkit-dir/t.svg"), std::string::npos) << r.err;
}

}  // namespace
