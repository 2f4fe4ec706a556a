// The ddpkit binary, run as a user would: exit statuses, one-line errors, pure JSON on stdout.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace {

struct Result {
  int status;
  std::string out;  // stdout only
  std::string err;  // stderr only
};

// Runs `ddpkit ARGS` from the build tree, capturing stdout and stderr separately.
Result RunDdpkit(const std::string& args) {
  // Unique per process and call: CTest runs tests of this binary in parallel processes.
  static int calls = 0;
  const std::string err_path = testing::TempDir() + "/ddpkit_cli_stderr." +
                               std::to_string(::getpid()) + "." + std::to_string(calls++);
  const std::string command =
      std::string(DDPKIT_BINARY_DIR) + "/bin/ddpkit " + args + " 2>" + err_path;
  Result result;
  FILE* pipe = ::popen(command.c_str(), "r");
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.out.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (FILE* err = std::fopen(err_path.c_str(), "r")) {
    while ((n = std::fread(buffer.data(), 1, buffer.size(), err)) > 0) result.err.append(buffer.data(), n);
    std::fclose(err);
  }
  std::remove(err_path.c_str());
  return result;
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

TEST(CliTest, UsageErrorsAreOneLineAndExit2) {
  for (const char* args : {"", "no-such-subcommand", "train --no-such-flag", "train --steps=abc",
                           "train --steps", "train extra-positional", "train --model mlp:3",
                           "train --bucket-cap-mb 0", "train --comm-hook fp8", "train --grad-accum 0",
                           "train --world-size 0", "buckets --sizes 1,x", "buckets --sizes 4,4 --order 1",
                           "buckets --sizes 4 --dtypes f32,f64", "buckets --sizes 4 --limits 0"}) {
    Result r = RunDdpkit(args);
    EXPECT_EQ(r.status, 2) << args;
    if (*args == '\0') continue;  // bare `ddpkit` prints the overview on stderr
    EXPECT_EQ(Lines(r.err), 1) << args << ": " << r.err;
    EXPECT_TRUE(absl::StartsWith(r.err, "ddpkit")) << r.err;
  }
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
  EXPECT_EQ(report["ddp"]["prev_iteration_grad_ready_order_indices"].size(), 6u);
}

// PyTorch's test vector D through the command line, and the exact JSON shape.
TEST(CliTest, BucketsPrintsTheAssignment) {
  Result r = RunDdpkit("buckets --sizes 50,25,50,25,50,25 --dtypes f32,f64,f32,f64,f32,f64 "
                       "--limits 200,400 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out),
            nlohmann::json::parse(R"({"buckets": [[0], [1], [2, 4], [3, 5]], "limits": [200, 200, 400, 400]})"));
  r = RunDdpkit("buckets --sizes 100,100,100 --sparse 1 --limits 400 --json");
  EXPECT_EQ(nlohmann::json::parse(r.out),
            nlohmann::json::parse(R"({"buckets": [[0], [1], [2]], "limits": [400, 0, 400]})"));
  r = RunDdpkit("buckets --sizes 10,10,10,10 --limits 40,80 --order 3,2,1,0");
  EXPECT_TRUE(absl::StrContains(r.out, "2, 1")) << r.out;
  r = RunDdpkit("buckets --model mlp:4,8,3 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json plans = nlohmann::json::parse(r.out);
  EXPECT_EQ(plans["initial"]["buckets"], nlohmann::json::parse("[[0, 1, 2, 3]]"));
  EXPECT_EQ(plans["rebuilt"]["buckets"].size(), 1u);
}

TEST(CliTest, MissingFilesFailWithExit1AndNameTheFile) {
  Result r = RunDdpkit("train --weights /nonexistent/w.safetensors");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "/nonexistent/w.safetensors")) << r.err;
}

}  // namespace
