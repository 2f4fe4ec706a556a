// The thread budget: who decides each rank's BLAS threads, and that running a world applies it.
#include "comm/world/thread_budget.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "autograd/compute_threads.h"
#include "comm/world/world.h"
#include "gtest/gtest.h"

namespace ddpkit::comm {
namespace {

// Clears the variables the budget reads, and restores them after the test.
class ThreadBudgetTest : public testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kNames) {
      const char* value = std::getenv(name);
      saved_.emplace_back(name, value == nullptr ? std::optional<std::string>()
                                                 : std::optional<std::string>(value));
      ::unsetenv(name);
    }
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name, value->c_str(), 1);
      } else {
        ::unsetenv(name);
      }
    }
  }
  static constexpr const char* kNames[] = {"OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                           "LOCAL_WORLD_SIZE"};
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

TEST_F(ThreadBudgetTest, CoresAreSharedByTheRanksHere) {
  const int cores = AvailableCores();
  WorldSpec threads{.backend = Backend::kThreads, .world_size = 2};
  absl::StatusOr<ThreadBudget> budget = ResolveThreadBudget(threads);
  ASSERT_TRUE(budget.ok()) << budget.status();
  EXPECT_EQ(budget->threads, std::max(1, cores / 2));
  EXPECT_EQ(budget->ranks_here, 2);
  EXPECT_EQ(budget->source, "cores / ranks");
  threads.world_size = 4 * cores;  // more ranks than cores: still one thread each
  EXPECT_EQ(ResolveThreadBudget(threads)->threads, 1);
  // Processes: the launcher's LOCAL_WORLD_SIZE says how many share the host.
  ::setenv("LOCAL_WORLD_SIZE", "2", 1);
  const WorldSpec gloo{.backend = Backend::kGloo};
  EXPECT_EQ(ResolveThreadBudget(gloo)->ranks_here, 2);
  ::unsetenv("LOCAL_WORLD_SIZE");
  EXPECT_EQ(ResolveThreadBudget(gloo)->threads, cores);
}

TEST_F(ThreadBudgetTest, TheFlagThenOpenBlasThenOmpDecide) {
  WorldSpec world{.backend = Backend::kThreads, .world_size = 2};
  ::setenv("OMP_NUM_THREADS", "3", 1);
  EXPECT_EQ(ResolveThreadBudget(world)->threads, 3);
  EXPECT_EQ(ResolveThreadBudget(world)->source, "OMP_NUM_THREADS");
  ::setenv("OPENBLAS_NUM_THREADS", "5", 1);
  EXPECT_EQ(ResolveThreadBudget(world)->threads, 5);
  world.threads_per_rank = 7;
  EXPECT_EQ(ResolveThreadBudget(world)->threads, 7);
  EXPECT_EQ(ResolveThreadBudget(world)->source, "--threads-per-rank");
  EXPECT_EQ(ResolveThreadBudget(world)->ToString().rfind("7 compute threads per rank (from "
                                                         "--threads-per-rank",
                                                         0),
            0u);
}

TEST_F(ThreadBudgetTest, ABadVariableIsNamed) {
  ::setenv("OMP_NUM_THREADS", "lots", 1);
  absl::StatusOr<ThreadBudget> budget = ResolveThreadBudget({.backend = Backend::kThreads});
  ASSERT_FALSE(budget.ok());
  EXPECT_EQ(budget.status().message(),
            "OMP_NUM_THREADS='lots' is not a thread count; set it to an integer >= 1 or unset it");
  EXPECT_EQ(ValidateWorldSpec({.backend = Backend::kThreads, .threads_per_rank = -1}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ThreadBudgetTest, RunningAWorldSizesTheBlasPool) {
  const int before = ComputeThreads();
  ASSERT_TRUE(RunOnWorld({.backend = Backend::kThreads, .world_size = 2, .threads_per_rank = 3},
                         [](ProcessGroup&) { return absl::OkStatus(); })
                  .ok());
  EXPECT_EQ(ComputeThreads(), 3);
  ASSERT_TRUE(RunOnWorld({.backend = Backend::kThreads, .world_size = 1}, [](ProcessGroup&) {
                return absl::OkStatus();
              }).ok());
  EXPECT_EQ(ComputeThreads(), AvailableCores());
  SetComputeThreads(before);
}

}  // namespace
}  // namespace ddpkit::comm
