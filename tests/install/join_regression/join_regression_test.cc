// A regression test a ddpkit user writes for their own model: DDP + Join on uneven per-rank data
// must train exactly as one process does on the same rows, with every collective a rank missed
// shadowed by Join — on a threads world, and on two Gloo processes.
//
// The arithmetic it pins down: DDP averages the ranks' gradients over the *world* size
// (divide_by_initial_world_size, the default), a joined rank contributing zeros. So at an
// iteration where `active` of `world` ranks still have data, DDP's step is one process's step on
// the union of their rows with the loss scaled by active / world.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "autograd/nn/nn.h"
#include "autograd/nn/optim.h"
#include "autograd/ops.h"
#include "autograd/random.h"
#include "comm/collective_listener.h"
#include "comm/world/world.h"
#include "join/join.h"
#include "reducer/distributed_data_parallel.h"

extern char** environ;

namespace {

using ddpkit::DType;
using ddpkit::Generator;
using ddpkit::Tensor;
namespace nn = ddpkit::nn;

constexpr int64_t kIn = 6, kHidden = 16, kOut = 3, kRows = 4;

// The user's model: ddpkit knows nothing of it.
class TwoLayerNet : public nn::Module {
 public:
  TwoLayerNet() {
    Generator gen(7);  // the same weights on every rank and in the reference
    fc1_ = RegisterModule("fc1",
                          std::make_shared<nn::Linear>(kIn, kHidden, true, gen, DType::kFloat64));
    fc2_ = RegisterModule("fc2",
                          std::make_shared<nn::Linear>(kHidden, kOut, true, gen, DType::kFloat64));
  }
  Tensor Forward(const Tensor& x) override { return fc2_->Forward(ddpkit::Tanh(fc1_->Forward(x))); }

 private:
  std::string Describe() const override { return "TwoLayerNet"; }
  std::shared_ptr<nn::Linear> fc1_, fc2_;
};

// Rank r's batch at iteration t: inputs [kRows, kIn] and regression targets [kRows, kOut].
std::pair<Tensor, Tensor> Batch(int rank, int iteration) {
  Generator gen(1000 * rank + iteration + 1);
  Tensor x = Tensor::Zeros({kRows, kIn}, DType::kFloat64);
  Tensor y = Tensor::Zeros({kRows, kOut}, DType::kFloat64);
  gen.FillUniform(x, -1.0, 1.0);
  gen.FillUniform(y, -1.0, 1.0);
  return {x, y};
}

std::vector<double> Flatten(const nn::Module& model) {
  std::vector<double> values;
  for (const Tensor& p : model.Parameters()) {
    for (double v : p.ToDoubles()) values.push_back(v);
  }
  return values;
}

// One process, each iteration on the union of the rows the ranks still holding data train on.
std::vector<double> OneProcessReference(const std::vector<int>& batches) {
  TwoLayerNet model;
  ddpkit::Sgd sgd(model.Parameters(), {.lr = 0.1});
  const int world = static_cast<int>(batches.size());
  const int iterations = *std::max_element(batches.begin(), batches.end());
  for (int t = 0; t < iterations; ++t) {
    ddpkit::TensorList xs, ys;
    for (int r = 0; r < world; ++r) {
      if (batches[r] <= t) continue;
      auto [x, y] = Batch(r, t);
      xs.push_back(x);
      ys.push_back(y);
    }
    const double active = static_cast<double>(xs.size());
    sgd.ZeroGrad();
    (ddpkit::Mse(model(ddpkit::Concat(xs)), ddpkit::Concat(ys)) * (active / world)).Backward();
    sgd.Step();
  }
  return Flatten(model);
}

// Counts the collectives a rank issues by what they were for, and whether Join issued them on a
// joined rank's behalf (CollectiveTag::shadow).
class CollectiveCounter : public ddpkit::comm::CollectiveListener {
 public:
  void OnQueued(const ddpkit::comm::Collective& c) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++counts_[{std::string(c.tag.purpose), c.tag.shadow}];
  }
  void OnStarted(uint64_t) override {}
  void OnFinished(uint64_t, bool) override {}
  int Count(const std::string& purpose, bool shadow) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = counts_.find({purpose, shadow});
    return it == counts_.end() ? 0 : it->second;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, bool>, int> counts_;
};

// What every rank runs, on any backend: trains with DDP under Join on `batches[rank]` batches,
// then checks this rank's result. Returns the first failed check, naming the rank.
absl::Status TrainUnevenAndCheck(ddpkit::comm::ProcessGroup& group,
                                 const std::vector<int>& batches) {
  const int rank = group.rank();
  const int mine = batches[rank];
  const int most = *std::max_element(batches.begin(), batches.end());
  CollectiveCounter counter;
  group.SetListener(&counter);

  auto model = std::make_shared<TwoLayerNet>();
  auto ddp = ddpkit::reducer::DistributedDataParallel::Create(model, group);
  if (!ddp.ok()) return ddp.status();
  ddpkit::Sgd sgd(model->Parameters(), {.lr = 0.1});
  ddpkit::join::Join::Run({ddp->get()}, {}, [&] {
    for (int t = 0; t < mine; ++t) {
      auto [x, y] = Batch(rank, t);
      sgd.ZeroGrad();
      ddpkit::Mse((*ddp)->Forward(x), y).Backward();
      sgd.Step();
    }
  });
  group.SetListener(nullptr);

  const std::vector<double> got = Flatten(*model), want = OneProcessReference(batches);
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::abs(got[i] - want[i]) > 1e-12 * (1.0 + std::abs(want[i]))) {
      return absl::InternalError("parameter value " + std::to_string(i) + " is " +
                                 std::to_string(got[i]) + ", one process gives " +
                                 std::to_string(want[i]));
    }
  }
  // Each of the iterations this rank had no data for, Join shadowed the active ranks' bucket
  // allreduces: every rank issued the same number of them.
  const int own = counter.Count("bucket", false), shadowed = counter.Count("bucket", true);
  const int buckets = mine > 0 ? own / mine : shadowed / most;
  if (buckets < 1 || own != mine * buckets || shadowed != (most - mine) * buckets) {
    return absl::InternalError(std::to_string(own) + " bucket allreduces of its own and " +
                               std::to_string(shadowed) + " shadowed, expected " +
                               std::to_string(mine) + " and " + std::to_string(most - mine) +
                               " iterations' worth");
  }
  // Join counts the active ranks once per iteration anyone runs, and once more to learn that
  // all have joined.
  const int counts = counter.Count("join_count", false) + counter.Count("join_count", true);
  if (counts != most + 1) {
    return absl::InternalError(std::to_string(counts) + " join_count allreduces, expected " +
                               std::to_string(most + 1));
  }
  return absl::OkStatus();
}

const std::vector<int> kThreadsBatches = {5, 3, 0, 1};
const std::vector<int> kGlooBatches = {2, 4};

TEST(JoinRegressionTest, ThreadsWorldMatchesOneProcess) {
  const absl::Status status =
      ddpkit::comm::RunOnWorld({.backend = ddpkit::comm::Backend::kThreads, .world_size = 4},
                               [](ddpkit::comm::ProcessGroup& group) {
                                 return TrainUnevenAndCheck(group, kThreadsBatches);
                               });
  EXPECT_TRUE(status.ok()) << status;
}

// --- two Gloo processes: this binary, started again as each rank ------------------------------

constexpr char kRankEnv[] = "JOIN_REGRESSION_GLOO_RANK";

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

pid_t StartRank(int rank, int world, int port) {
  std::vector<std::string> env = {"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port),
                                  "WORLD_SIZE=" + std::to_string(world),
                                  "RANK=" + std::to_string(rank),
                                  std::string(kRankEnv) + "=" + std::to_string(rank)};
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  envp.push_back(nullptr);
  char exe[] = "/proc/self/exe";
  char* argv[] = {exe, nullptr};
  pid_t pid = -1;
  return posix_spawn(&pid, exe, nullptr, nullptr, argv, envp.data()) == 0 ? pid : -1;
}

TEST(JoinRegressionTest, TwoGlooProcessesMatchOneProcess) {
  const int world = static_cast<int>(kGlooBatches.size()), port = FreePort();
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    pids.push_back(StartRank(r, world, port));
    ASSERT_GT(pids.back(), 0) << "could not start rank " << r;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (int r = 0; r < world; ++r) {
    int status = 0;
    while (waitpid(pids[r], &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        for (pid_t pid : pids) kill(pid, SIGKILL);
        FAIL() << "rank " << r << " still running after 120 s";
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "rank " << r << " failed (its message is above)";
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* rank = std::getenv(kRankEnv)) {  // one Gloo rank: MASTER_ADDR etc. are set
    const absl::Status status = ddpkit::comm::RunOnWorld(
        {.backend = ddpkit::comm::Backend::kGloo},
        [](ddpkit::comm::ProcessGroup& group) { return TrainUnevenAndCheck(group, kGlooBatches); });
    if (!status.ok()) std::cerr << "gloo rank " << rank << ": " << status << "\n";
    return status.ok() ? 0 : 1;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
