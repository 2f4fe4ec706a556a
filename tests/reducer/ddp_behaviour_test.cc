// DDP behaviours beyond plain averaging: the rebuild, unused parameters, static graph with
// checkpointing, gradient_as_bucket_view, no_sync, comm hooks and the logging data.
#include <mutex>

#include "autograd/checkpoint.h"
#include "autograd/nn/optim.h"
#include "autograd/random.h"
#include "gmock/gmock.h"
#include "tests/reducer/ddp_test_util.h"
#include "tests/reducer/test_models.h"

namespace ddpkit::reducer::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// PyTorch's test Net: three bias-free Linear layers, 2 -> 10 -> 50 -> 4 (720 floats).
std::shared_ptr<nn::Sequential> PyTorchTestNet() {
  Generator gen(3);
  auto net = std::make_shared<nn::Sequential>();
  net->Append(std::make_shared<nn::Linear>(2, 10, false, gen));
  net->Append(std::make_shared<nn::ReLU>());
  net->Append(std::make_shared<nn::Linear>(10, 50, false, gen));
  net->Append(std::make_shared<nn::ReLU>());
  net->Append(std::make_shared<nn::Linear>(50, 4, false, gen));
  return net;
}

// The logging-data vector of PyTorch's test_ddp_logging_data_cpu: one bucket of 2880 bytes
// first; after iteration 1 the gradients arrived as 2, 1, 0 and one bucket is rebuilt so.
TEST(DdpRebuildTest, RebuildsOnceInGradientArrivalOrder) {
  RunWorld(2, [](comm::ProcessGroup& group) {
    auto ddp = MakeDdp(PyTorchTestNet(), group);
    const DdpLoggingData& log = ddp->LoggingData();
    ASSERT_EQ(log.initial_buckets_size(), 1);
    EXPECT_EQ(log.initial_buckets(0).bytes(), 2880);
    EXPECT_THAT(log.initial_buckets(0).param_indices(), ElementsAre(0, 1, 2));
    EXPECT_EQ(log.total_parameter_size_bytes(), 2880);
    EXPECT_FALSE(log.has_rebuilt_buckets());

    Tensor x = RandomRows(4, 2, 10 + group.rank()).To(DType::kFloat32);
    for (int i = 0; i < 3; ++i) {
      CrossEntropy(ddp->Forward(x), Labels(4, 4, group.rank())).Backward();
      if (i == 0) {
        EXPECT_THAT(log.prev_iteration_grad_ready_order_indices(), ElementsAre(2, 1, 0));
        EXPECT_FALSE(ddp->reducer().has_rebuilt_buckets());  // at the next forward
      }
    }
    EXPECT_TRUE(log.has_rebuilt_buckets());
    ASSERT_EQ(log.rebuilt_buckets_size(), 1);
    EXPECT_THAT(log.rebuilt_buckets(0).param_indices(), ElementsAre(2, 1, 0));
    EXPECT_THAT(log.rebuilt_buckets(0).param_names(),
                ElementsAre("4.weight", "2.weight", "0.weight"));
    EXPECT_EQ(log.rebuilt_buckets(0).bytes(), 2880);
    EXPECT_EQ(log.rebuilt_buckets(0).limit_bytes(), static_cast<int64_t>(kDefaultFirstBucketBytes));
    EXPECT_EQ(log.iteration(), 3);
  });
}

TEST(DdpRebuildTest, SmallCapsGiveSeveralBucketsFirstBucketSmall) {
  RunWorld(2, [](comm::ProcessGroup& group) {
    // 4.weight is 800 B, 2.weight 2000 B, 0.weight 80 B: first limit 1000 B closes after
    // 4.weight + 2.weight; the cap 100 B then closes 0.weight alone.
    auto ddp = MakeDdp(PyTorchTestNet(), group,
                       {.pytorch_version = {1, 13},  // a first bucket of its own
                        .bucket_cap_mb = 100.0 / (1 << 20),
                        .first_bucket_mb = 1000.0 / (1 << 20)});
    Tensor x = RandomRows(4, 2, 1).To(DType::kFloat32);
    for (int i = 0; i < 2; ++i) CrossEntropy(ddp->Forward(x), Labels(4, 4, 0)).Backward();
    const DdpLoggingData& log = ddp->LoggingData();
    ASSERT_EQ(log.rebuilt_buckets_size(), 2);
    EXPECT_THAT(log.rebuilt_buckets(0).param_indices(), ElementsAre(2, 1));
    EXPECT_THAT(log.rebuilt_buckets(1).param_indices(), ElementsAre(0));
    EXPECT_EQ(log.rebuilt_buckets(0).limit_bytes(), 1000);
    EXPECT_EQ(log.rebuilt_buckets(1).limit_bytes(), 100);
  });
}

class DdpUnusedParametersTest : public ::testing::TestWithParam<bool> {};  // grad_as_view

TEST_P(DdpUnusedParametersTest, LocallyUnusedGetTheAverageGloballyUnusedStayNone) {
  const int world = 3;
  auto x = [](int rank) { return RandomRows(2, 4, 50 + rank); };
  auto y = [](int rank) { return Labels(2, 3, rank); };
  // Reference: the mean over ranks of each rank's loss, one process.
  BranchyNet reference(9);
  Tensor total;
  for (int r = 0; r < world; ++r) {
    reference.use_a = r == 0;
    Tensor loss = CrossEntropy(reference.Forward(x(r)), y(r)) * (1.0 / world);
    total = total.defined() ? total + loss : loss;
  }
  total.Backward();
  const Grads expected = GradsOf(reference);
  ASSERT_EQ(expected.count("never.weight"), 0u);

  RunWorld(world, [&](comm::ProcessGroup& group) {
    auto model = std::make_shared<BranchyNet>(9);
    model->use_a = group.rank() == 0;
    auto ddp = MakeDdp(model, group,
                       {.find_unused_parameters = true, .gradient_as_bucket_view = GetParam()});
    for (int step = 0; step < 2; ++step) {
      for (const Tensor& p : model->Parameters()) p.set_grad(Tensor());
      CrossEntropy(ddp->Forward(x(group.rank())), y(group.rank())).Backward();
      EXPECT_TRUE(GradsClose(GradsOf(*model), expected, 1e-12, 1e-14)) << "step " << step;
      EXPECT_THAT(ddp->LoggingData().unused_parameter_names(),
                  ElementsAre("never.weight", "never.bias"));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(GradAsView, DdpUnusedParametersTest, ::testing::Bool());

// Usage inside no_sync micro-steps counts: "a" is used only in rank 0's no_sync step, yet its
// accumulated gradient is averaged and reaches every rank (PyTorch's fix of issue #69031;
// before it, "a" was treated as unused and silently diverged).
TEST(DdpUnusedParametersTest, UseInsideNoSyncIsRecorded) {
  const int world = 2;
  BranchyNet reference(9);
  CrossEntropy(reference.Forward(RandomRows(2, 4, 1)), Labels(2, 3, 0)).Backward();
  const Grads local = GradsOf(reference);
  RunWorld(world, [&](comm::ProcessGroup& group) {
    auto model = std::make_shared<BranchyNet>(9);
    auto ddp = MakeDdp(model, group, {.find_unused_parameters = true});
    if (group.rank() == 0) {
      auto no_sync = ddp->NoSync();
      CrossEntropy(ddp->Forward(RandomRows(2, 4, 1)), Labels(2, 3, 0)).Backward();
    }
    model->use_a = false;  // the synced step uses "b" on every rank
    CrossEntropy(ddp->Forward(RandomRows(2, 4, 2 + group.rank())), Labels(2, 3, 1)).Backward();
    const Grads grads = GradsOf(*model);
    ASSERT_EQ(grads.count("a.weight"), 1u) << "a was used on rank 0, so every rank gets it";
    std::vector<double> half = local.at("a.weight");
    for (double& v : half) v /= world;
    EXPECT_EQ(grads.at("a.weight"), half);
    EXPECT_THAT(ddp->LoggingData().unused_parameter_names(),
                ElementsAre("never.weight", "never.bias"));
  });
}

// Before PyTorch 2.4 (issue 69031) the use under no_sync was not recorded: "a" counts as
// unused at the synced step, so rank 0 keeps its local, unsynced gradient and rank 1 has none.
TEST(DdpUnusedParametersTest, UseInsideNoSyncIsLostUnderPyTorch113) {
  BranchyNet reference(9);
  CrossEntropy(reference.Forward(RandomRows(2, 4, 1)), Labels(2, 3, 0)).Backward();
  const Grads local = GradsOf(reference);
  RunWorld(2, [&](comm::ProcessGroup& group) {
    auto model = std::make_shared<BranchyNet>(9);
    auto ddp = MakeDdp(model, group, {.pytorch_version = {1, 13}, .find_unused_parameters = true});
    if (group.rank() == 0) {
      auto no_sync = ddp->NoSync();
      CrossEntropy(ddp->Forward(RandomRows(2, 4, 1)), Labels(2, 3, 0)).Backward();
    }
    model->use_a = false;
    CrossEntropy(ddp->Forward(RandomRows(2, 4, 2 + group.rank())), Labels(2, 3, 1)).Backward();
    const Grads grads = GradsOf(*model);
    if (group.rank() == 0) {
      ASSERT_EQ(grads.count("a.weight"), 1u);
      EXPECT_EQ(grads.at("a.weight"), local.at("a.weight"));
    } else {
      EXPECT_EQ(grads.count("a.weight"), 0u);
    }
    EXPECT_THAT(ddp->LoggingData().unused_parameter_names(),
                ElementsAre("a.weight", "a.bias", "never.weight", "never.bias"));
  });
}

// PyTorch's test_ignored_output(_with_unused_parameters): forwards whose output is never
// backpropagated (evaluation inside a training loop) leave DDP ready for the next synced
// iteration: four ignored forwards, then four real steps, and the real steps' gradients are the
// one-process mean. With find_unused_parameters the never-used layer stays without a gradient.
class DdpIgnoredOutputTest : public ::testing::TestWithParam<bool> {
 protected:
  // With find_unused_parameters a model with layers no rank uses (BranchyNet: "b", "never"),
  // else one whose every parameter is used.
  std::shared_ptr<nn::Module> MakeModel() const {
    if (GetParam()) return std::make_shared<BranchyNet>(9);
    return nn::MakeMlp({4, 5, 3}, 9, DType::kFloat64);
  }
};

TEST_P(DdpIgnoredOutputTest, ForwardsWithoutBackwardThenTrainingIsFine) {
  const int world = 2;
  auto x = [](int rank) { return RandomRows(2, 4, 70 + rank); };
  std::shared_ptr<nn::Module> reference = MakeModel();
  Tensor total;
  for (int r = 0; r < world; ++r) {
    Tensor loss = CrossEntropy(reference->Forward(x(r)), Labels(2, 3, r)) * (1.0 / world);
    total = total.defined() ? total + loss : loss;
  }
  total.Backward();
  const Grads expected = GradsOf(*reference);
  RunWorld(world, [&](comm::ProcessGroup& group) {
    std::shared_ptr<nn::Module> model = MakeModel();
    auto ddp = MakeDdp(model, group, {.find_unused_parameters = GetParam()});
    for (int i = 0; i < 4; ++i) ddp->Forward(x(group.rank()));  // outputs ignored
    for (int step = 0; step < 4; ++step) {
      for (const Tensor& p : model->Parameters()) p.set_grad(Tensor());
      CrossEntropy(ddp->Forward(x(group.rank())), Labels(2, 3, group.rank())).Backward();
      EXPECT_TRUE(GradsClose(GradsOf(*model), expected, 1e-10, 1e-12)) << "step " << step;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(FindUnused, DdpIgnoredOutputTest, ::testing::Bool());

TEST(DdpStaticGraphTest, LayerCheckpointedTwiceMatchesSingleProcess) {
  const int world = 2;
  TwiceCheckpointedNet reference(5);
  Sgd ref_sgd(reference.Parameters(), {.lr = 0.1});
  std::vector<Grads> expected;
  for (int step = 0; step < 3; ++step) {
    ref_sgd.ZeroGrad();
    Tensor total;
    for (int r = 0; r < world; ++r) {
      Tensor loss =
          CrossEntropy(reference.Forward(RandomRows(2, 4, 100 * step + r)), Labels(2, 3, r)) * 0.5;
      total = total.defined() ? total + loss : loss;
    }
    total.Backward();
    expected.push_back(GradsOf(reference));
    ref_sgd.Step();
  }
  RunWorld(world, [&](comm::ProcessGroup& group) {
    auto model = std::make_shared<TwiceCheckpointedNet>(5);
    auto ddp = MakeDdp(model, group, {.static_graph = true});
    Sgd sgd(model->Parameters(), {.lr = 0.1});
    for (int step = 0; step < 3; ++step) {
      sgd.ZeroGrad();
      CrossEntropy(ddp->Forward(RandomRows(2, 4, 100 * step + group.rank())),
                   Labels(2, 3, group.rank()))
          .Backward();
      EXPECT_TRUE(GradsClose(GradsOf(*model), expected[step], 1e-12, 1e-14)) << "step " << step;
      sgd.Step();
    }
    EXPECT_TRUE(ddp->reducer().has_rebuilt_buckets());  // static graph rebuilds after iteration 2
  });
}

TEST(DdpGradientAsBucketViewTest, GradsAreViewsIntoTheBuckets) {
  RunWorld(2, [](comm::ProcessGroup& group) {
    auto model = nn::MakeMlp({3, 5, 2}, 1, DType::kFloat64);
    auto ddp = MakeDdp(model, group, {.gradient_as_bucket_view = true});
    Sgd sgd(model->Parameters(), {.lr = 0.1});
    for (int step = 0; step < 3; ++step) {
      sgd.ZeroGrad(/*set_to_none=*/step % 2 == 0);  // both ways of zeroing keep the views
      CrossEntropy(ddp->Forward(RandomRows(2, 3, step)), Labels(2, 2, group.rank())).Backward();
      const Reducer& reducer = ddp->reducer();
      for (size_t i = 0; i < reducer.parameters().size(); ++i) {
        const VariableLocator& at = reducer.variable_locators()[i];
        EXPECT_TRUE(reducer.parameters()[i].second.grad().IsAliasOf(
            reducer.buckets()[at.bucket_index].views[at.intra_bucket_index]))
            << reducer.parameters()[i].first << " at step " << step;
      }
      sgd.Step();
    }
  });
}

TEST(DdpNoSyncTest, GradientsStayLocalUntilTheSyncedStep) {
  RunWorld(2, [](comm::ProcessGroup& group) {
    auto model = nn::MakeMlp({3, 2}, 1, DType::kFloat64);
    auto ddp = MakeDdp(model, group);
    Tensor x = RandomRows(2, 3, 10 + group.rank());
    {
      auto no_sync = ddp->NoSync();
      CrossEntropy(ddp->Forward(x), Labels(2, 2, 0)).Backward();
    }
    // Local: the two ranks saw different rows, so their gradients differ.
    std::vector<double> local = model->Parameters()[0].grad().ToDoubles();
    Tensor gathered = Tensor::Zeros({2 * static_cast<int64_t>(local.size())}, DType::kFloat64);
    ASSERT_TRUE(group.Allgather(model->Parameters()[0].grad().Flatten(), gathered)->Wait().ok());
    EXPECT_NE(gathered.Rows(0, local.size()).ToDoubles(),
              gathered.Rows(local.size(), 2 * local.size()).ToDoubles());
    CrossEntropy(ddp->Forward(x), Labels(2, 2, 0)).Backward();  // synced: averaged sums
    ASSERT_TRUE(group.Allgather(model->Parameters()[0].grad().Flatten(), gathered)->Wait().ok());
    EXPECT_EQ(gathered.Rows(0, local.size()).ToDoubles(),
              gathered.Rows(local.size(), 2 * local.size()).ToDoubles());
  });
}

// PyTorch's ModuleForDdpCommHook vector: p = ones(2, 2), forward(x) = p + x + rank, loss = mean.
class CommHookModule : public nn::Module {
 public:
  explicit CommHookModule(int rank) : rank_(rank) {
    p_ = RegisterParameter("p", Tensor::Full({2, 2}, 1.0, DType::kFloat64));
  }
  Tensor Forward(const Tensor& x) override {
    return p_ + x + Tensor::Scalar(rank_, DType::kFloat64);
  }

 private:
  std::string Describe() const override { return "CommHookModule"; }
  int rank_;
  Tensor p_;
};

TEST(DdpCommHookTest, WithoutHookGradIsAQuarter) {
  RunWorld(2, [](comm::ProcessGroup& group) {
    auto model = std::make_shared<CommHookModule>(group.rank());
    auto ddp = MakeDdp(model, group);
    Mean(ddp->Forward(Tensor::Zeros({2, 2}, DType::kFloat64))).Backward();
    EXPECT_THAT(model->Parameters()[0].grad().ToDoubles(), ElementsAre(0.25, 0.25, 0.25, 0.25));
  });
}

TEST(DdpCommHookTest, HookResultBecomesTheGradient) {
  RunWorld(2, [](comm::ProcessGroup& group) {
    auto model = std::make_shared<CommHookModule>(group.rank());
    auto ddp = MakeDdp(model, group);
    std::vector<size_t> seen_buckets;
    ddp->RegisterCommHook(
        [&](GradBucket& bucket) {
          seen_buckets.push_back(bucket.index());
          EXPECT_TRUE(bucket.is_last());
          EXPECT_EQ(bucket.parameters().size(), 1u);
          // Not pre-divided: the raw local gradient is in the buffer.
          EXPECT_THAT(bucket.buffer().ToDoubles(), ElementsAre(0.25, 0.25, 0.25, 0.25));
          return comm::Future::Completed(Tensor::Full({4}, 2.0, DType::kFloat64));
        },
        "ones_plus_ones");
    Mean(ddp->Forward(Tensor::Zeros({2, 2}, DType::kFloat64))).Backward();
    EXPECT_THAT(model->Parameters()[0].grad().ToDoubles(), ElementsAre(2, 2, 2, 2));
    EXPECT_THAT(seen_buckets, ElementsAre(0));
    EXPECT_EQ(ddp->LoggingData().comm_hook(), "ones_plus_ones");
  });
}

class RecordingObserver : public TraceObserver {
 public:
  void OnEvent(const TraceEvent& event) override {
    std::string line(TraceEventName(event.type));
    if (event.param_index >= 0) line += " p" + std::to_string(event.param_index);
    if (event.bucket_index >= 0) line += " b" + std::to_string(event.bucket_index);
    lines.push_back(line);
  }
  std::vector<std::string> lines;
};

TEST(DdpTraceTest, OneIterationInOrder) {
  RunWorld(2, [](comm::ProcessGroup& group) {
    auto model = nn::MakeMlp({3, 2}, 1);  // one Linear: weight (0), bias (1), one bucket
    // PyTorch's order: the bias's hook first (linear is addmm(bias, x, weight.t())).
    auto ddp = MakeDdp(model, group);
    RecordingObserver observer;
    ddp->reducer().SetTraceObserver(&observer);
    Tensor x = Tensor::Full({2, 3}, 1.0);
    CrossEntropy(ddp->Forward(x), Labels(2, 2, 0)).Backward();
    EXPECT_THAT(observer.lines,
                ElementsAre("forward", "hook_fired p1", "hook_fired p0", "bucket_ready b0",
                            "allreduce_start b0", "allreduce_end b0", "finalize"));
    observer.lines.clear();
    CrossEntropy(ddp->Forward(x), Labels(2, 2, 0)).Backward();
    EXPECT_EQ(observer.lines[0], "forward");
    EXPECT_EQ(observer.lines[1], "rebuild");
  });
}

}  // namespace
}  // namespace ddpkit::reducer::testing
