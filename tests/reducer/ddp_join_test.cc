// DDP under Join with uneven inputs: PyTorch's divide-factor vector, and randomised patterns
// (ranks with zero inputs included) across DDP's options, checked against a single-process
// reference of the same per-iteration formula; throw_on_early_termination.
#include <mutex>
#include <random>

#include "autograd/nn/optim.h"
#include "gmock/gmock.h"
#include "join/join.h"
#include "tests/reducer/ddp_test_util.h"
#include "tests/reducer/test_models.h"

namespace ddpkit::reducer::testing::ddp_join_test {
namespace {

using ::testing::HasSubstr;

// PyTorch's test_ddp_grad_div_uneven_inputs: Linear(5, 5, bias=False), input 50 * ones(1, 5),
// loss = sum, so every rank's local gradient is 50 * ones; rank 0 runs 3 iterations, the
// others 5.
class BiasFreeLinear : public nn::Module {
 public:
  BiasFreeLinear() {
    Generator gen(0);
    linear_ =
        RegisterModule("linear", std::make_shared<nn::Linear>(5, 5, false, gen, DType::kFloat64));
  }
  Tensor Forward(const Tensor& x) override { return linear_->Forward(x); }

 private:
  std::string Describe() const override { return "BiasFreeLinear"; }
  std::shared_ptr<nn::Linear> linear_;
};

class DdpJoinDivideTest : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(DdpJoinDivideTest, GradientPerIterationFollowsTheDivideMode) {
  const auto [world, divide_by_initial] = GetParam();
  RunWorld(
      world, [&, world = world, divide_by_initial = divide_by_initial](comm::ProcessGroup& group) {
        auto model = std::make_shared<BiasFreeLinear>();
        auto ddp = MakeDdp(model, group);
        ddp->set_divide_by_initial_world_size(divide_by_initial);
        const int iterations = group.rank() == 0 ? 3 : 5;
        join::Join::Run({ddp.get()}, {}, [&] {
          for (int i = 0; i < iterations; ++i) {
            model->Parameters()[0].set_grad(Tensor());
            Sum(ddp->Forward(Tensor::Full({1, 5}, 50.0, DType::kFloat64))).Backward();
            const double expected = i < 3 || !divide_by_initial ? 50.0 : 50.0 * (world - 1) / world;
            for (double g : model->Parameters()[0].grad().ToDoubles()) {
              ASSERT_NEAR(g, expected, 1e-12) << "rank " << group.rank() << ", iteration " << i;
            }
          }
        });
        EXPECT_EQ(ddp->authoritative_rank(), world - 1);  // the highest of the last joiners
      });
}

INSTANTIATE_TEST_SUITE_P(WorldsAndModes, DdpJoinDivideTest,
                         ::testing::Combine(::testing::Values(2, 3, 4), ::testing::Bool()));

struct JoinCase {
  int world = 2;
  std::vector<int> inputs{};  // iterations per rank
  DdpOptions options{};
  std::string hook{};
  bool divide_by_initial = true;
  int micro_batches = 1;  // > 1: accumulation, all but the last under no_sync
};

const std::vector<int64_t> kWidths = {4, 6, 3};
Tensor Rows(int rank, int iteration, int micro) {
  return RandomRows(2, 4, 1000 * rank + 10 * iteration + micro);
}
Tensor Targets(int rank, int iteration) { return Labels(2, 3, rank + iteration); }

// One process applying the formula: at iteration t the active ranks A_t contribute their
// gradients, divided by the world size or by |A_t|; weights step with SGD(0.1).
std::vector<Grads> Reference(const JoinCase& c, std::vector<double>* final_weights) {
  auto model = nn::MakeMlp(kWidths, 11, DType::kFloat64);
  Sgd sgd(model->Parameters(), {.lr = 0.1});
  const int iterations = *std::max_element(c.inputs.begin(), c.inputs.end());
  std::vector<Grads> per_iteration;
  for (int t = 0; t < iterations; ++t) {
    int active = 0;
    for (int r = 0; r < c.world; ++r) active += c.inputs[r] > t;
    const double divisor = c.divide_by_initial ? c.world : active;
    sgd.ZeroGrad();
    for (int r = 0; r < c.world; ++r) {
      if (c.inputs[r] <= t) continue;
      for (int k = 0; k < c.micro_batches; ++k) {
        (CrossEntropy(model->Forward(Rows(r, t, k)), Targets(r, t)) * (1.0 / divisor)).Backward();
      }
    }
    per_iteration.push_back(GradsOf(*model));
    sgd.Step();
  }
  for (const Tensor& p : model->Parameters()) {
    for (double v : p.ToDoubles()) final_weights->push_back(v);
  }
  return per_iteration;
}

void RunJoinCase(const JoinCase& c) {
  std::vector<double> expected_weights;
  const std::vector<Grads> expected = Reference(c, &expected_weights);
  const int most = *std::max_element(c.inputs.begin(), c.inputs.end());
  int highest_last_joiner = -1;
  for (int r = 0; r < c.world; ++r) {
    if (c.inputs[r] == most) highest_last_joiner = r;
  }
  std::mutex mu;
  std::vector<std::vector<double>> finals(c.world);
  RunWorld(c.world, [&](comm::ProcessGroup& group) {
    const int rank = group.rank();
    auto model = nn::MakeMlp(kWidths, 11, DType::kFloat64);
    auto ddp = MakeDdp(model, group, c.options);
    ddp->set_divide_by_initial_world_size(c.divide_by_initial);
    if (!c.hook.empty()) ddp->RegisterBuiltinCommHook(*ParseBuiltinCommHook(c.hook));
    Sgd sgd(model->Parameters(), {.lr = 0.1});
    join::Join::Run({ddp.get()}, {}, [&] {
      for (int t = 0; t < c.inputs[rank]; ++t) {
        sgd.ZeroGrad();
        for (int k = 0; k < c.micro_batches; ++k) {
          auto step = [&] {
            CrossEntropy(ddp->Forward(Rows(rank, t, k)), Targets(rank, t)).Backward();
          };
          if (k + 1 < c.micro_batches) {
            auto no_sync = ddp->NoSync();
            step();
          } else {
            step();
          }
        }
        EXPECT_TRUE(GradsClose(GradsOf(*model), expected[t], 1e-10, 1e-12))
            << "rank " << rank << ", iteration " << t;
        sgd.Step();
      }
    });
    EXPECT_EQ(ddp->authoritative_rank(), highest_last_joiner);
    std::vector<double> weights;
    for (const Tensor& p : model->Parameters()) {
      for (double v : p.ToDoubles()) weights.push_back(v);
    }
    std::lock_guard<std::mutex> lock(mu);
    finals[rank] = std::move(weights);
  });
  for (int r = 0; r < c.world; ++r) {
    EXPECT_EQ(finals[r], finals[highest_last_joiner])
        << "rank " << r << " ended with another model";
    ASSERT_EQ(finals[r].size(), expected_weights.size());
    for (size_t i = 0; i < expected_weights.size(); ++i) {
      ASSERT_NEAR(finals[r][i], expected_weights[i], 1e-10) << "rank " << r;
    }
  }
}

TEST(DdpJoinTest, RandomUnevenPatternsAcrossOptions) {
  std::mt19937 rng(2026);
  // PyTorch 1.13's caps: a given cap and a first bucket of its own.
  const DdpOptions small{.pytorch_version = {1, 13},
                         .bucket_cap_mb = 100.0 / (1 << 20),
                         .first_bucket_mb = 60.0 / (1 << 20)};
  std::vector<std::pair<std::string, JoinCase>> variants = {
      {"default", {.options = small}},
      {"find_unused",
       {.options = {.pytorch_version = small.pytorch_version,
                    .bucket_cap_mb = small.bucket_cap_mb,
                    .first_bucket_mb = small.first_bucket_mb,
                    .find_unused_parameters = true}}},
      {"static_graph",
       {.options = {.pytorch_version = small.pytorch_version,
                    .bucket_cap_mb = small.bucket_cap_mb,
                    .first_bucket_mb = small.first_bucket_mb,
                    .static_graph = true}}},
      {"bucket_view",
       {.options = {.pytorch_version = small.pytorch_version,
                    .bucket_cap_mb = small.bucket_cap_mb,
                    .first_bucket_mb = small.first_bucket_mb,
                    .gradient_as_bucket_view = true}}},
      {"hook", {.options = small, .hook = "allreduce"}},
      {"divide_by_active", {.options = small, .divide_by_initial = false}},
      {"accumulation", {.options = small, .micro_batches = 2}},
  };
  for (int world = 2; world <= 4; ++world) {
    for (auto& [name, variant] : variants) {
      JoinCase c = variant;
      c.world = world;
      c.inputs = RandomUnevenInputs(rng, world);
      SCOPED_TRACE(name + ", world " + std::to_string(world) + ", inputs " +
                   InputsString(c.inputs));
      RunJoinCase(c);
    }
  }
}

TEST(DdpJoinTest, RebuildStillPendingWhenARankJoins) {
  RunJoinCase({.world = 3,
               .inputs = {1, 4, 0},
               .options = {.pytorch_version = {1, 13},
                           .bucket_cap_mb = 100.0 / (1 << 20),
                           .first_bucket_mb = 60.0 / (1 << 20)}});
  RunJoinCase({.world = 3, .inputs = {0, 1, 3}, .options = {.static_graph = true}});
}

// Records the model's gradients at the end of each iteration this rank shadows: listed after
// DDP, its hook runs once DDP's shadowed backward has written them.
class GradProbe final : public join::Joinable {
 public:
  GradProbe(comm::ProcessGroup& group, const nn::Module& model) : group_(group), model_(model) {}
  std::unique_ptr<join::JoinHook> MakeJoinHook() override {
    struct Hook final : join::JoinHook {
      explicit Hook(GradProbe& p) : probe(p) {}
      void MainHook() override { probe.seen.push_back(GradsOf(probe.model_)); }
      GradProbe& probe;
    };
    return std::make_unique<Hook>(*this);
  }
  comm::ProcessGroup& join_process_group() const override { return group_; }
  std::vector<Grads> seen;

 private:
  comm::ProcessGroup& group_;
  const nn::Module& model_;
};

// Two epochs under Join on a model whose "a" and "never" layers no rank uses. A joined rank's
// shadowed iterations must leave its reducer where trained ones would: .grad as the active
// ranks have it (none for the unused layers), and — when it shadowed static graph's first
// iteration — the graph recorded, so the next epoch issues what the other ranks issue.
TEST(DdpJoinTest, ShadowedIterationsLeaveTheStateTrainedOnesWould) {
  const std::vector<std::vector<int>> epochs = {{0, 2, 3}, {2, 2, 1}};
  const int world = 3;
  auto most = [](const std::vector<int>& inputs) {
    return *std::max_element(inputs.begin(), inputs.end());
  };
  auto make_model = [] {
    auto model = std::make_shared<BranchyNet>(5);
    model->use_a = false;  // trunk and b on every rank
    return model;
  };
  // One process on the formula: iteration t of epoch e averages the active ranks' gradients.
  std::vector<Grads> expected;
  auto reference = make_model();
  Sgd reference_sgd(reference->Parameters(), {.lr = 0.1});
  for (size_t e = 0; e < epochs.size(); ++e) {
    for (int t = 0; t < most(epochs[e]); ++t) {
      reference_sgd.ZeroGrad();
      for (int r = 0; r < world; ++r) {
        if (epochs[e][r] <= t) continue;
        const int it = 10 * static_cast<int>(e) + t;
        (CrossEntropy(reference->Forward(Rows(r, it, 0)), Targets(r, it)) * (1.0 / world))
            .Backward();
      }
      expected.push_back(GradsOf(*reference));
      reference_sgd.Step();
    }
  }
  for (const DdpOptions& options :
       {DdpOptions{.find_unused_parameters = true}, DdpOptions{.static_graph = true}}) {
    SCOPED_TRACE(options.static_graph ? "static_graph" : "find_unused_parameters");
    std::mutex mu;
    std::vector<std::vector<double>> finals(world);
    RunWorld(world, [&](comm::ProcessGroup& group) {
      const int rank = group.rank();
      auto model = make_model();
      auto ddp = MakeDdp(model, group, options);
      Sgd sgd(model->Parameters(), {.lr = 0.1});
      GradProbe probe(group, *model);
      size_t first = 0;  // global index of the epoch's first iteration
      for (size_t e = 0; e < epochs.size(); ++e) {
        const int mine = epochs[e][rank];
        probe.seen.clear();
        join::Join::Run({ddp.get(), &probe}, {}, [&] {
          for (int t = 0; t < mine; ++t) {
            const int it = 10 * static_cast<int>(e) + t;
            sgd.ZeroGrad();
            CrossEntropy(ddp->Forward(Rows(rank, it, 0)), Targets(rank, it)).Backward();
            EXPECT_TRUE(GradsClose(GradsOf(*model), expected[first + t], 1e-10, 1e-12))
                << "rank " << rank << " trained epoch " << e << " iteration " << t;
            sgd.Step();
          }
        });
        ASSERT_EQ(probe.seen.size(), static_cast<size_t>(most(epochs[e]) - mine));
        for (size_t i = 0; i < probe.seen.size(); ++i) {
          EXPECT_TRUE(GradsClose(probe.seen[i], expected[first + mine + i], 1e-10, 1e-12))
              << "rank " << rank << " shadowed epoch " << e << " iteration " << mine + i;
        }
        first += most(epochs[e]);
      }
      std::vector<double> weights;
      for (const Tensor& p : model->Parameters()) {
        for (double v : p.ToDoubles()) weights.push_back(v);
      }
      std::lock_guard<std::mutex> lock(mu);
      finals[rank] = std::move(weights);
    });
    std::vector<double> want;
    for (const Tensor& p : reference->Parameters()) {
      for (double v : p.ToDoubles()) want.push_back(v);
    }
    for (int r = 0; r < world; ++r) {
      ASSERT_EQ(finals[r].size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(finals[r][i], want[i], 1e-10) << "rank " << r;
      }
    }
  }
}

// Static graph under Join with ranks whose graphs differ ("a" on rank 0, "b" elsewhere). The
// active ranks share their hook counts for the sake of ranks that joined, but each must keep its
// own: rank 0 never fires "b"'s hooks, and waiting for them would leave its bucket unreduced.
TEST(DdpJoinTest, StaticGraphKeepsEachActiveRanksOwnHookCounts) {
  const int world = 3;
  const std::vector<int> inputs = {3, 3, 2};
  std::vector<Grads> expected;  // one process: the active ranks' losses, each on its branch
  BranchyNet reference(9);
  Sgd reference_sgd(reference.Parameters(), {.lr = 0.1});
  for (int t = 0; t < 3; ++t) {
    reference_sgd.ZeroGrad();
    for (int r = 0; r < world; ++r) {
      if (inputs[r] <= t) continue;
      reference.use_a = r == 0;
      (CrossEntropy(reference.Forward(Rows(r, t, 0)), Targets(r, t)) * (1.0 / world)).Backward();
    }
    expected.push_back(GradsOf(reference));
    reference_sgd.Step();
  }
  RunWorld(world, [&](comm::ProcessGroup& group) {
    const int rank = group.rank();
    auto model = std::make_shared<BranchyNet>(9);
    model->use_a = rank == 0;
    auto ddp = MakeDdp(model, group, {.static_graph = true});
    Sgd sgd(model->Parameters(), {.lr = 0.1});
    join::Join::Run({ddp.get()}, {}, [&] {
      for (int t = 0; t < inputs[rank]; ++t) {
        sgd.ZeroGrad();
        CrossEntropy(ddp->Forward(Rows(rank, t, 0)), Targets(rank, t)).Backward();
        EXPECT_TRUE(GradsClose(GradsOf(*model), expected[t], 1e-10, 1e-12))
            << "rank " << rank << ", iteration " << t;
        sgd.Step();
      }
    });
  });
}

// find_unused_parameters records use under no_sync too (the synced step must count it). A rank
// whose last iteration was a no_sync one on layer "a" leaves that use in its map; when it joins,
// it must shadow with an empty map, or "a" counts as used in the other ranks' synced steps and
// gets zeros where it should get no .grad (mutation stale-shadow-used-map, mutate_join.sh).
TEST(DdpJoinTest, ARankThatEndsInNoSyncShadowsWithAnEmptyUsedMap) {
  const std::vector<int> inputs = {2, 3};  // odd iterations under no_sync
  RunWorld(2, [&](comm::ProcessGroup& group) {
    const int rank = group.rank();
    auto model = std::make_shared<BranchyNet>(3);
    auto ddp = MakeDdp(model, group, {.find_unused_parameters = true});
    join::Join::Run({ddp.get()}, {}, [&] {
      for (int t = 0; t < inputs[rank]; ++t) {
        if (t % 2 == 0) {
          for (const Tensor& p : model->Parameters()) p.set_grad(Tensor());
        }
        model->use_a = rank == 0 && t == 1;  // rank 0's last, no_sync, iteration uses "a"
        auto step = [&] {
          CrossEntropy(ddp->Forward(Rows(rank, t, 0)), Targets(rank, t)).Backward();
        };
        if (t % 2 == 1) {
          auto no_sync = ddp->NoSync();
          step();
        } else {
          step();
        }
      }
    });
    // Iteration 2: rank 1 alone on "b"; rank 0 shadows it.
    std::vector<std::string> with_grad;
    for (const auto& [name, values] : GradsOf(*model)) with_grad.push_back(name);
    EXPECT_EQ(with_grad,
              (std::vector<std::string>{"b.bias", "b.weight", "trunk.bias", "trunk.weight"}))
        << "rank " << rank;
  });
}

TEST(DdpJoinTest, ThrowOnEarlyTerminationStopsEveryRankInTheSameIteration) {
  std::mutex mu;
  std::vector<int> stopped_at(3, -1);
  std::vector<std::string> errors(3);
  RunWorld(3, [&](comm::ProcessGroup& group) {
    auto model = nn::MakeMlp(kWidths, 11, DType::kFloat64);
    auto ddp = MakeDdp(model, group);
    const int inputs = group.rank() == 1 ? 2 : 5;
    int t = 0;
    try {
      join::Join::Run({ddp.get()}, {.throw_on_early_termination = true}, [&] {
        for (t = 0; t < inputs; ++t) {
          CrossEntropy(ddp->Forward(Rows(group.rank(), t, 0)), Targets(group.rank(), t)).Backward();
        }
      });
    } catch (const Error& e) {
      std::lock_guard<std::mutex> lock(mu);
      stopped_at[group.rank()] = t;
      errors[group.rank()] = e.what();
    }
    EXPECT_EQ(ddp->authoritative_rank(), -1) << "post hooks must not run";
  });
  EXPECT_EQ(stopped_at, (std::vector<int>{2, 2, 2}));
  EXPECT_THAT(errors[1], HasSubstr("rank 1: this rank exhausted its inputs"));
  EXPECT_THAT(errors[0], HasSubstr("at least one rank exhausted its inputs"));
}

TEST(DdpJoinTest, WithoutJoinUnevenInputsEndInANamedFailureNotAHang) {
  absl::Status status = RunWorldStatus(2, [](comm::ProcessGroup& group) {
    auto model = nn::MakeMlp(kWidths, 11, DType::kFloat64);
    auto ddp = MakeDdp(model, group);
    for (int t = 0; t < (group.rank() == 0 ? 1 : 3); ++t) {
      CrossEntropy(ddp->Forward(Rows(group.rank(), t, 0)), Targets(group.rank(), t)).Backward();
    }
  });
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr("rank 0 has finished without issuing it"));
}

// A SyncBatchNorm-like model: every forward allreduces the batch's feature means, a
// collective of the model's own that no join hook knows about.
class SyncedStatsNet : public nn::Module {
 public:
  explicit SyncedStatsNet(comm::ProcessGroup& group) : group_(group) {
    Generator gen(4);
    linear_ =
        RegisterModule("linear", std::make_shared<nn::Linear>(4, 3, true, gen, DType::kFloat64));
  }
  Tensor Forward(const Tensor& x) override {
    Tensor h = linear_->Forward(x);
    Tensor mean = Tensor::Zeros({3}, DType::kFloat64);
    for (int64_t r = 0; r < h.size(0); ++r) {
      for (int64_t c = 0; c < 3; ++c)
        mean.data<double>()[c] += h.data<double>()[r * 3 + c] / h.size(0);
    }
    if (absl::Status s = group_.Allreduce(mean, comm::ReduceOp::kAvg)->Wait(); !s.ok())
      ThrowStatus(s);
    Tensor centre = Tensor::Empty(h.shape(), DType::kFloat64);  // the mean repeated per row
    for (int64_t i = 0; i < centre.numel(); ++i)
      centre.data<double>()[i] = mean.data<double>()[i % 3];
    return Sub(h, centre);  // the global mean is a constant here, as running stats are
  }

 private:
  std::string Describe() const override { return "SyncedStatsNet"; }
  comm::ProcessGroup& group_;
  std::shared_ptr<nn::Linear> linear_;
};

TEST(DdpJoinTest, AModelWithItsOwnCollectiveFailsUnderPlainJoinWithADiagnosis) {
  absl::Status status = RunWorldStatus(
      3,
      [](comm::ProcessGroup& group) {
        auto model = std::make_shared<SyncedStatsNet>(group);
        auto ddp = MakeDdp(model, group);
        join::Join::Run({ddp.get()}, {}, [&] {
          for (int t = 0; t < (group.rank() == 2 ? 1 : 3); ++t) {
            CrossEntropy(ddp->Forward(Rows(group.rank(), t, 0)), Targets(group.rank(), t))
                .Backward();
          }
        });
      },
      absl::Seconds(10));
  ASSERT_FALSE(status.ok()) << "the joined rank cannot shadow the model's own allreduce";
  EXPECT_THAT(std::string(status.message()), HasSubstr("sequence number"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("ALLREDUCE"));
}

TEST(DdpJoinTest, ThrowModeRescuesAModelWithItsOwnCollective) {
  std::mutex mu;
  std::vector<int> stopped_at(3, -1);
  std::vector<std::vector<double>> finals(3);
  RunWorld(3, [&](comm::ProcessGroup& group) {
    auto model = std::make_shared<SyncedStatsNet>(group);
    auto ddp = MakeDdp(model, group);
    Sgd sgd(model->Parameters(), {.lr = 0.1});
    int t = 0;
    try {
      join::Join::Run({ddp.get()}, {.throw_on_early_termination = true}, [&] {
        for (t = 0; t < (group.rank() == 2 ? 1 : 3); ++t) {
          sgd.ZeroGrad();
          CrossEntropy(ddp->Forward(Rows(group.rank(), t, 0)), Targets(group.rank(), t)).Backward();
          sgd.Step();
        }
      });
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), absl::StatusCode::kAborted) << e.what();
    }
    std::vector<double> weights;
    for (const Tensor& p : model->Parameters()) {
      for (double v : p.ToDoubles()) weights.push_back(v);
    }
    std::lock_guard<std::mutex> lock(mu);
    stopped_at[group.rank()] = t;
    finals[group.rank()] = std::move(weights);
  });
  EXPECT_EQ(stopped_at, (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(finals[0], finals[1]);
  EXPECT_EQ(finals[0], finals[2]);
}

}  // namespace
}  // namespace ddpkit::reducer::testing::ddp_join_test
