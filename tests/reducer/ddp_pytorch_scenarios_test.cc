// PyTorch's own DDP and Join scenarios not covered elsewhere (docs/pytorch_tests.md maps each):
// PowerSGD under Join, Join's model equivalence, static graph changed both ways and two forwards
// before one backward, a user exception inside Join, several joinables in throw mode, tied
// weights under checkpointing, a disabled Join, and a no-grad forward under no_sync.
#include <mutex>

#include "autograd/checkpoint.h"
#include "autograd/grad_mode.h"
#include "autograd/nn/optim.h"
#include "gmock/gmock.h"
#include "join/join.h"
#include "reducer/extras/powersgd_hook.h"
#include "reducer/extras/zero_redundancy_optimizer.h"
#include "tests/reducer/ddp_test_util.h"
#include "tests/reducer/test_models.h"

namespace ddpkit::reducer::testing::ddp_pytorch_scenarios_test {
namespace {

using ::testing::HasSubstr;

std::vector<double> Flat(const nn::Module& model) {
  std::vector<double> out;
  for (const Tensor& p : model.Parameters()) {
    for (double v : p.ToDoubles()) out.push_back(v);
  }
  return out;
}

Tensor Rows(int rank, int iteration) { return RandomRows(2, 4, 500 + 10 * iteration + rank); }
Tensor Targets(int rank, int iteration) { return Labels(2, 3, rank + iteration); }

// ---------------------------------------------------------------- test_ddp_uneven_inputs
// PowerSGD (start 1, no error feedback, no warm start, as PyTorch's matrix) and the allreduce
// hook under Join with uneven inputs: every rank ends with the same model, and the authoritative
// rank is W-1 (the highest rank with the most inputs).
struct UnevenHookCase {
  std::vector<int> inputs;
  bool powersgd = true;
};

class DdpUnevenHookTest : public ::testing::TestWithParam<UnevenHookCase> {};

TEST_P(DdpUnevenHookTest, IdenticalModelsAndAuthoritativeRankIsTheLast) {
  const UnevenHookCase& c = GetParam();
  const int world = static_cast<int>(c.inputs.size());
  std::mutex mu;
  std::vector<std::vector<double>> finals(world);
  RunWorld(world, [&](comm::ProcessGroup& group) {
    auto model = nn::MakeMlp({4, 16, 3}, 7);
    // A 1 MB cap, as PyTorch's test: one bucket here.
    auto ddp = MakeDdp(model, group, {.bucket_cap_mb = 1});
    if (c.powersgd) {
      ASSERT_TRUE(RegisterPowerSgdHook(*ddp, PowerSgdVariant::kLayerwise,
                                       {.start_iteration = 1,
                                        .min_compression_rate = 0,
                                        .use_error_feedback = false,
                                        .warm_start = false})
                      .ok());
    } else {
      ddp->RegisterBuiltinCommHook(*ParseBuiltinCommHook("allreduce"));
    }
    Sgd sgd(model->Parameters(), {.lr = 0.1});
    join::Join::Run({ddp.get()}, {}, [&] {
      for (int t = 0; t < c.inputs[group.rank()]; ++t) {
        sgd.ZeroGrad();
        Tensor x = Rows(group.rank(), t).To(DType::kFloat32);
        CrossEntropy(ddp->Forward(x), Targets(group.rank(), t)).Backward();
        sgd.Step();
      }
    });
    EXPECT_EQ(ddp->authoritative_rank(), world - 1);
    EXPECT_TRUE(ddp->LoggingData().join_uneven_inputs());
    std::lock_guard<std::mutex> lock(mu);
    finals[group.rank()] = Flat(*model);
  });
  for (int r = 0; r < world; ++r) EXPECT_EQ(finals[r], finals[world - 1]) << "rank " << r;
  EXPECT_NE(finals[0], Flat(*nn::MakeMlp({4, 16, 3}, 7))) << "it trained";
}

INSTANTIATE_TEST_SUITE_P(PyTorchsMaps, DdpUnevenHookTest,
                         ::testing::Values(UnevenHookCase{{5, 7}}, UnevenHookCase{{0, 3}},
                                           UnevenHookCase{{5, 6, 8}}, UnevenHookCase{{0, 2, 2}},
                                           UnevenHookCase{{5, 7}, false},
                                           UnevenHookCase{{0, 1, 3}, false}));

// ---------------------------------------------------------- test_ddp_join_model_equivalence
// Linear(10, 10, bias=False), the same input on every rank, loss = sum: the gradient is the
// same on every rank and does not depend on the weight. Rank r runs 2(r+1) iterations at lr·W
// under Join; one local model run Σ 2(r+1) iterations at lr ends with the same weight.
class Linear10 : public nn::Module {
 public:
  Linear10() {
    Generator gen(2);
    linear_ =
        RegisterModule("linear", std::make_shared<nn::Linear>(10, 10, false, gen, DType::kFloat64));
  }
  Tensor Forward(const Tensor& x) override { return linear_->Forward(x); }

 private:
  std::string Describe() const override { return "Linear10"; }
  std::shared_ptr<nn::Linear> linear_;
};

Tensor Input10() { return RandomRows(4, 10, 3); }

class DdpJoinEquivalenceTest : public ::testing::TestWithParam<int> {};

TEST_P(DdpJoinEquivalenceTest, UnevenRanksAtLrTimesWEqualOneModelOverAllIterations) {
  const int world = GetParam();
  const double lr = 0.01;
  Linear10 local;
  Sgd local_sgd(local.Parameters(), {.lr = lr});
  for (int r = 0; r < world; ++r) {
    for (int i = 0; i < 2 * (r + 1); ++i) {
      local_sgd.ZeroGrad();
      Sum(local.Forward(Input10())).Backward();
      local_sgd.Step();
    }
  }
  const std::vector<double> expected = Flat(local);
  RunWorld(world, [&](comm::ProcessGroup& group) {
    auto model = std::make_shared<Linear10>();
    auto ddp = MakeDdp(model, group);
    Sgd sgd(model->Parameters(), {.lr = lr * world});
    join::Join::Run({ddp.get()}, {}, [&] {
      for (int i = 0; i < 2 * (group.rank() + 1); ++i) {
        sgd.ZeroGrad();
        Sum(ddp->Forward(Input10())).Backward();
        sgd.Step();
      }
    });
    const std::vector<double> got = Flat(*model);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], expected[i], 1e-9) << "rank " << group.rank() << " [" << i << "]";
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, DdpJoinEquivalenceTest, ::testing::Values(2, 3, 4));

// ------------------------------------------------------------------ test_invalid_static_graph
// The branch= layer under static_graph, its iterations chosen so that it goes from unused to
// used (0 then 1) or from used to unused (1 then 2): each is PyTorch's changed-graph failure.
absl::Status StaticGraphOverIterations(const std::vector<int64_t>& iterations) {
  const nn::MlpSpec spec = *nn::ParseModelSpec("mlp:4,6,3,branch=iters");
  return RunWorldStatus(2, [&](comm::ProcessGroup& group) {
    auto model = nn::MakeMlp(spec, 1, DType::kFloat64);
    auto ddp = MakeDdp(model, group, {.static_graph = true});
    for (int64_t it : iterations) {
      model->SetForwardContext({.rank = group.rank(), .iteration = it});
      CrossEntropy(ddp->Forward(Rows(group.rank(), 0)), Targets(group.rank(), 0)).Backward();
    }
  });
}

TEST(DdpStaticGraphChangedTest, UnusedThenUsedIsPyTorchsChangedGraph) {
  absl::Status status = StaticGraphOverIterations({0, 1});
  EXPECT_THAT(
      std::string(status.message()),
      AllOf(HasSubstr("Your training graph has changed in this iteration"), HasSubstr("branch.")));
}

TEST(DdpStaticGraphChangedTest, UsedThenUnusedIsReportedAtTheNextForward) {
  absl::Status status = StaticGraphOverIterations({1, 2, 3});
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("Expected to have finished reduction in the prior iteration"),
                    HasSubstr("Your training graph has changed in this iteration"),
                    HasSubstr("branch.weight")));
  EXPECT_TRUE(StaticGraphOverIterations({1, 3, 5}).ok()) << "the same graph every time";
}

// Static graph, two forwards then one backward on their summed losses, each iteration: the
// gradients are one process's (PyTorch: "works").
TEST(DdpStaticGraphChangedTest, TwoForwardsThenOneBackward) {
  const int world = 2;
  auto reference = nn::MakeMlp({4, 6, 3}, 8, DType::kFloat64);
  std::vector<Grads> expected;
  for (int it = 0; it < 3; ++it) {
    for (const Tensor& p : reference->Parameters()) p.set_grad(Tensor());
    for (int r = 0; r < world; ++r) {
      Tensor loss = CrossEntropy(reference->Forward(Rows(r, it)), Targets(r, it)) +
                    CrossEntropy(reference->Forward(Rows(r, it + 10)), Targets(r, it + 10));
      (loss * (1.0 / world)).Backward();
    }
    expected.push_back(GradsOf(*reference));
  }
  RunWorld(world, [&](comm::ProcessGroup& group) {
    auto model = nn::MakeMlp({4, 6, 3}, 8, DType::kFloat64);
    auto ddp = MakeDdp(model, group, {.static_graph = true});
    const int r = group.rank();
    for (int it = 0; it < 3; ++it) {
      for (const Tensor& p : model->Parameters()) p.set_grad(Tensor());
      Tensor a = CrossEntropy(ddp->Forward(Rows(r, it)), Targets(r, it));
      Tensor b = CrossEntropy(ddp->Forward(Rows(r, it + 10)), Targets(r, it + 10));
      (a + b).Backward();
      EXPECT_TRUE(GradsClose(GradsOf(*model), expected[it], 1e-10, 1e-12)) << "iteration " << it;
    }
  });
}

// ------------------------------------------------------------ test_ddp_uneven_input_exception
// A user exception inside Join::Run on rank 0 reaches rank 0's caller unchanged; rank 1, still
// in its loop, ends with a named failure instead of hanging.
TEST(DdpJoinExceptionTest, ReachesTheRaisingRanksCallerAndTheOthersFailByName) {
  std::mutex mu;
  std::string raised, other;
  absl::Status status = RunWorldStatus(
      2,
      [&](comm::ProcessGroup& group) {
        auto model = nn::MakeMlp({4, 6, 3}, 1, DType::kFloat64);
        auto ddp = MakeDdp(model, group);
        try {
          join::Join::Run({ddp.get()}, {}, [&] {
            for (int t = 0; t < 3; ++t) {
              if (group.rank() == 0 && t == 1) throw std::runtime_error("user error in forward");
              CrossEntropy(ddp->Forward(Rows(group.rank(), t)), Targets(group.rank(), t))
                  .Backward();
            }
          });
        } catch (const Error& e) {
          std::lock_guard<std::mutex> lock(mu);
          other = e.what();
        } catch (const std::runtime_error& e) {
          std::lock_guard<std::mutex> lock(mu);
          raised = e.what();
        }
      },
      absl::Seconds(20));
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(raised, "user error in forward");
  EXPECT_THAT(other, HasSubstr("rank 0 has finished without issuing it"));
}

// ---------------------------------------------------------------- test_multiple_joinables_throw
// DDP and the ZeRO optimizer, both joinables, in throw mode: every rank throws in the iteration
// the first rank ran out at, and the models stay identical.
TEST(DdpJoinThrowTest, SeveralJoinablesStopEveryRankInTheSameIteration) {
  std::mutex mu;
  std::vector<int> stopped_at(3, -1);
  std::vector<std::vector<double>> finals(3);
  RunWorld(3, [&](comm::ProcessGroup& group) {
    auto model = nn::MakeMlp({4, 6, 3}, 1, DType::kFloat64);
    auto ddp = MakeDdp(model, group);
    auto zero = ZeroRedundancyOptimizer::Create(model->NamedParameters(), group,
                                                MakeSgdFactory({.lr = 0.1}));
    ASSERT_TRUE(zero.ok()) << zero.status();
    int t = 0;
    try {
      join::Join::Run({ddp.get(), zero->get()}, {.throw_on_early_termination = true}, [&] {
        for (t = 0; t < 2 + group.rank(); ++t) {
          (*zero)->ZeroGrad();
          CrossEntropy(ddp->Forward(Rows(group.rank(), t)), Targets(group.rank(), t)).Backward();
          (*zero)->Step();
        }
      });
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), absl::StatusCode::kAborted) << e.what();
    }
    std::lock_guard<std::mutex> lock(mu);
    stopped_at[group.rank()] = t;
    finals[group.rank()] = Flat(*model);
  });
  EXPECT_EQ(stopped_at, (std::vector<int>{2, 2, 2}));
  EXPECT_EQ(finals[0], finals[1]);
  EXPECT_EQ(finals[0], finals[2]);
}

// ---------------------------------------- test_ddp_checkpointing_(twice_)weight_sharing
// l2 shares l1's weight and runs under reentrant checkpointing (once or twice): under
// static_graph every iteration's gradients are one process's.
class TiedCheckpointNet : public nn::Module {
 public:
  explicit TiedCheckpointNet(int applications) : applications_(applications) {
    Generator gen(6);
    l1_ = RegisterModule("l1", std::make_shared<nn::Linear>(4, 4, true, gen, DType::kFloat64));
    l2_ = RegisterModule("l2", std::make_shared<nn::Linear>(4, 4, true, gen, DType::kFloat64));
    head_ = RegisterModule("head", std::make_shared<nn::Linear>(4, 3, true, gen, DType::kFloat64));
    l2_->TieWeightTo(*l1_);
  }
  Tensor Forward(const Tensor& x) override {
    Tensor h = Relu(l1_->Forward(x));
    for (int i = 0; i < applications_; ++i) {
      h = Checkpoint([this](const Tensor& in) { return Relu(l2_->Forward(in)); }, h);
    }
    return head_->Forward(h);
  }

 private:
  std::string Describe() const override { return "TiedCheckpointNet"; }
  int applications_;
  std::shared_ptr<nn::Linear> l1_, l2_, head_;
};

class DdpTiedCheckpointTest : public ::testing::TestWithParam<int> {};

TEST_P(DdpTiedCheckpointTest, StaticGraphMatchesOneProcess) {
  const int world = 2, applications = GetParam();
  TiedCheckpointNet reference(applications);
  Sgd reference_sgd(reference.Parameters(), {.lr = 0.1});
  std::vector<Grads> expected;
  for (int it = 0; it < 3; ++it) {
    reference_sgd.ZeroGrad();
    for (int r = 0; r < world; ++r) {
      Tensor x = Rows(r, it);
      (CrossEntropy(reference.Forward(x), Targets(r, it)) * (1.0 / world)).Backward();
    }
    expected.push_back(GradsOf(reference));
    reference_sgd.Step();
  }
  ASSERT_EQ(expected[0].count("l2.weight"), 0u) << "the tied weight is listed once";
  RunWorld(world, [&](comm::ProcessGroup& group) {
    auto model = std::make_shared<TiedCheckpointNet>(applications);
    auto ddp = MakeDdp(model, group, {.static_graph = true});
    Sgd sgd(model->Parameters(), {.lr = 0.1});
    for (int it = 0; it < 3; ++it) {
      sgd.ZeroGrad();
      Tensor x = Rows(group.rank(), it);
      CrossEntropy(ddp->Forward(x), Targets(group.rank(), it)).Backward();
      EXPECT_TRUE(GradsClose(GradsOf(*model), expected[it], 1e-10, 1e-12)) << "iteration " << it;
      sgd.Step();
    }
  });
}

INSTANTIATE_TEST_SUITE_P(OnceAndTwice, DdpTiedCheckpointTest, ::testing::Values(1, 2));

// ------------------------------------------------------------ a disabled Join; no_sync no_grad
// Join with enable=false and even inputs: each iteration's gradients are the mean over ranks.
// Under no_sync, a forward in no-grad mode adds nothing: the synced step after it still gives
// one process's mean of that step alone.
Grads OneProcessMean(int world, int iteration) {
  auto reference = nn::MakeMlp({4, 6, 3}, 4, DType::kFloat64);
  for (int r = 0; r < world; ++r) {
    Tensor x = Rows(r, iteration);
    (CrossEntropy(reference->Forward(x), Targets(r, iteration)) * (1.0 / world)).Backward();
  }
  return GradsOf(*reference);
}

TEST(DdpJoinDisabledTest, GradientsAreTheMeanOverRanks) {
  const int world = 3;
  const Grads expected[2] = {OneProcessMean(world, 0), OneProcessMean(world, 1)};
  RunWorld(world, [&](comm::ProcessGroup& group) {
    auto model = nn::MakeMlp({4, 6, 3}, 4, DType::kFloat64);
    auto ddp = MakeDdp(model, group);
    join::Join::Run({ddp.get()}, {.enable = false}, [&] {
      for (int t = 0; t < 2; ++t) {
        for (const Tensor& p : model->Parameters()) p.set_grad(Tensor());
        Tensor x = Rows(group.rank(), t);
        CrossEntropy(ddp->Forward(x), Targets(group.rank(), t)).Backward();
        EXPECT_TRUE(GradsClose(GradsOf(*model), expected[t], 1e-12, 1e-14)) << "iteration " << t;
      }
    });
    EXPECT_FALSE(ddp->LoggingData().join_uneven_inputs());
  });
}

TEST(DdpNoSyncTest, ANoGradForwardUnderNoSyncAddsNothing) {
  const int world = 2;
  const Grads expected = OneProcessMean(world, 1);
  RunWorld(world, [&](comm::ProcessGroup& group) {
    auto model = nn::MakeMlp({4, 6, 3}, 4, DType::kFloat64);
    auto ddp = MakeDdp(model, group);
    {
      auto no_sync = ddp->NoSync();
      NoGradGuard no_grad;
      Tensor out = ddp->Forward(Rows(group.rank(), 0));
      EXPECT_FALSE(out.requires_grad());
    }
    EXPECT_TRUE(GradsOf(*model).empty());
    Tensor x = Rows(group.rank(), 1);
    CrossEntropy(ddp->Forward(x), Targets(group.rank(), 1)).Backward();
    EXPECT_TRUE(GradsClose(GradsOf(*model), expected, 1e-12, 1e-14));
  });
}

}  // namespace
}  // namespace ddpkit::reducer::testing::ddp_pytorch_scenarios_test
