// env:// rendezvous: every missing or malformed variable is named, with what to do.
#include "comm/world/rendezvous.h"

#include <cstdlib>
#include <map>

#include "absl/strings/match.h"
#include "comm/world/slurm_env.h"
#include "gtest/gtest.h"

namespace ddpkit::comm {
namespace {

class EnvRendezvousTest : public testing::Test {
 protected:
  void SetUp() override {
    ::setenv("MASTER_ADDR", "127.0.0.1", 1);
    ::setenv("MASTER_PORT", "29500", 1);
    ::setenv("RANK", "1", 1);
    ::setenv("WORLD_SIZE", "4", 1);
    ::setenv("LOCAL_RANK", "1", 1);
    ::setenv("LOCAL_WORLD_SIZE", "2", 1);
  }
  void TearDown() override {
    for (const char* name :
         {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}) {
      ::unsetenv(name);
    }
  }
  static std::string Error() {
    absl::StatusOr<EnvRendezvous> env = ReadEnvRendezvous();
    EXPECT_FALSE(env.ok());
    if (!env.ok()) {
      EXPECT_EQ(env.status().code(), absl::StatusCode::kInvalidArgument);
    }
    return env.ok() ? "" : std::string(env.status().message());
  }
};

TEST_F(EnvRendezvousTest, ReadsTorchrunVariables) {
  absl::StatusOr<EnvRendezvous> env = ReadEnvRendezvous();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->master_port, 29500);
  EXPECT_EQ(env->rank, 1);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 2);
}

TEST_F(EnvRendezvousTest, MissingAndMalformedVariablesAreNamed) {
  ::unsetenv("WORLD_SIZE");
  EXPECT_TRUE(absl::StartsWith(
      Error(), "env:// rendezvous: environment variable WORLD_SIZE expected, but not set"));
  ::setenv("WORLD_SIZE", "four", 1);
  EXPECT_EQ(Error(), "env:// rendezvous: WORLD_SIZE='four' is not an integer in [1, 1048576]");
  ::setenv("WORLD_SIZE", "4", 1);
  ::setenv("RANK", "4", 1);
  EXPECT_EQ(Error(), "env:// rendezvous: RANK='4' is not an integer in [0, 3]");
  ::setenv("RANK", "1", 1);
  ::setenv("MASTER_PORT", "70000", 1);
  EXPECT_EQ(Error(), "env:// rendezvous: MASTER_PORT='70000' is not an integer in [1, 65535]");
  ::setenv("MASTER_PORT", "29500", 1);
  ::setenv("LOCAL_RANK", "2", 1);
  EXPECT_EQ(Error(), "env:// rendezvous: LOCAL_RANK='2' is not an integer in [0, 1]");
}

TEST_F(EnvRendezvousTest, ABusyPortSaysWhatToDo) {
  auto first = TcpStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(first.ok());
  auto second = TcpStoreServer::Start("127.0.0.1", (*first)->port());
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::StrContains(second.status().message(), "is another job using this port?"))
      << second.status();
}

TEST(SlurmEnvTest, NodelistsAndTasksPerNode) {
  EXPECT_EQ(FirstHostOfNodelist("gpu[07-09,12],cpu1"), "gpu07");
  EXPECT_EQ(FirstHostOfNodelist("node1,node2"), "node1");
  EXPECT_EQ(FirstHostOfNodelist("rack[3]-n[1-4]"), "rack3-n[1-4]");
  EXPECT_EQ(FirstHostOfNodelist("solo"), "solo");
  EXPECT_EQ(FirstHostOfNodelist(""), "");
  EXPECT_EQ(TasksOnNode("4(x2),3", 0), 4);
  EXPECT_EQ(TasksOnNode("4(x2),3", 1), 4);
  EXPECT_EQ(TasksOnNode("4(x2),3", 2), 3);
  EXPECT_EQ(TasksOnNode("4(x2),3", 3), 0);
  EXPECT_EQ(TasksOnNode("2(y2)", 0), 0);
}

// srun starts ranks with SLURM_* set and none of torchrun's variables: they are derived.
TEST(SlurmEnvTest, TorchrunVariablesFromASlurmStep) {
  const std::map<std::string, std::string> slurm = {{"SLURM_PROCID", "5"},
                                                    {"SLURM_NTASKS", "8"},
                                                    {"SLURM_LOCALID", "1"},
                                                    {"SLURM_NODEID", "1"},
                                                    {"SLURM_TASKS_PER_NODE", "4(x2)"},
                                                    {"SLURM_JOB_NODELIST", "gpu[07-08]"},
                                                    {"SLURM_JOB_ID", "123456"}};
  for (const auto& [name, value] : slurm) ::setenv(name.c_str(), value.c_str(), 1);
  const std::map<std::string, std::string> vars = TorchrunVariablesFromSlurm();
  for (const auto& [name, value] : slurm) ::unsetenv(name.c_str());
  EXPECT_EQ(vars, (std::map<std::string, std::string>{{"RANK", "5"},
                                                      {"WORLD_SIZE", "8"},
                                                      {"LOCAL_RANK", "1"},
                                                      {"LOCAL_WORLD_SIZE", "4"},
                                                      {"MASTER_ADDR", "gpu07"},
                                                      {"MASTER_PORT", "23456"}}));
  EXPECT_TRUE(TorchrunVariablesFromSlurm().empty());  // outside a step: nothing
}

}  // namespace
}  // namespace ddpkit::comm
