// `ddpkit simulate` run as a user would: text, JSON, a timeline, one-line errors, and speed.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

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

TEST(SimulateCliTest, BadFlagsAreOneLineUsageErrors) {
  for (const char* args : {"--world-size 0", "--world-size 2,x", "--network mesh", "--compute fast",
                           "--hook int8", "--model nonsense"}) {
    auto r = Simulate(args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
  }
}

}  // namespace
