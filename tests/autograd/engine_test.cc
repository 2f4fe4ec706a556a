// The backward engine: ordering, accumulation, hooks and end-of-backward callbacks.
#include "autograd/engine.h"

#include <thread>

#include "autograd/accumulate_grad.h"
#include "autograd/checkpoint.h"
#include "autograd/grad_mode.h"
#include "autograd/nn/nn.h"
#include "autograd/ops.h"
#include "tests/autograd/test_util.h"

namespace ddpkit {
namespace {

using testing_util::Leaf;

TEST(EngineTest, SharedSubexpressionGetsBothContributions) {
  Tensor x = Leaf({1.0, -2.0});
  Tensor square = Mul(x, x);
  Sum(Add(square, square)).Backward();  // d/dx 2x^2 = 4x
  EXPECT_EQ(x.grad().ToDoubles(), (std::vector<double>{4.0, -8.0}));
}

TEST(EngineTest, DiamondRunsTheJoinNodeOnceWithSummedGradient) {
  Tensor x = Leaf({3.0});
  Tensor a = MulScalar(x, 2.0);
  Tensor d = Add(MulScalar(a, 3.0), MulScalar(a, 4.0));  // 14 x
  Sum(d).Backward();
  EXPECT_EQ(x.grad().item(), 14.0);
}

TEST(EngineTest, MultipleRootsIncludingOneUpstreamOfAnother) {
  Tensor x = Leaf({1.0, 1.0});
  Tensor r1 = Sum(MulScalar(x, 2.0));
  Tensor r2 = MulScalar(r1, 3.0);  // depends on r1
  Engine::Backward({r1, r2});      // 2 + 6 per element
  EXPECT_EQ(x.grad().ToDoubles(), (std::vector<double>{8.0, 8.0}));
}

TEST(EngineTest, ExplicitRootGradient) {
  Tensor x = Leaf({1.0, 2.0});
  Tensor y = MulScalar(x, 3.0);
  Engine::Backward({y}, {Tensor::FromVector<double>({1.0, 10.0}, {2})});
  EXPECT_EQ(x.grad().ToDoubles(), (std::vector<double>{3.0, 30.0}));
}

TEST(EngineTest, RepeatedBackwardAccumulatesInPlace) {
  Tensor x = Leaf({1.0, 2.0});
  Tensor loss = Sum(MulScalar(x, 5.0));
  loss.Backward();
  const void* storage = x.grad().raw_data();
  loss.Backward();
  EXPECT_EQ(x.grad().ToDoubles(), (std::vector<double>{10.0, 10.0}));
  EXPECT_EQ(x.grad().raw_data(), storage);
}

TEST(EngineTest, GradThatIsAViewStaysAView) {
  // What DDP's gradient_as_bucket_view relies on: .grad aliases a slice of a flat buffer.
  Tensor bucket = Tensor::Zeros({5}, DType::kFloat64);
  Tensor x = Leaf({1.0, 2.0});
  x.set_grad(bucket.Rows(1, 3));
  Sum(MulScalar(x, 2.0)).Backward();
  EXPECT_TRUE(x.grad().IsAliasOf(bucket.Rows(1, 3)));
  EXPECT_EQ(bucket.ToDoubles(), (std::vector<double>{0, 2, 2, 0, 0}));
}

TEST(EngineTest, FirstGradientIsNeverAnAliasOfSomethingElse) {
  Tensor x = Leaf({1.0, 2.0});
  Tensor seed = Tensor::FromVector<double>({1.0, 1.0}, {2});
  Engine::Backward({Reshape(x, {2})}, {seed});  // the seed flows through unchanged
  EXPECT_FALSE(x.grad().SharesStorageWith(seed));
  seed.Fill(9.0);
  EXPECT_EQ(x.grad().ToDoubles(), (std::vector<double>{1.0, 1.0}));
}

TEST(EngineTest, HooksRunInRegistrationOrderAfterAccumulationAndCanBeRemoved) {
  Tensor x = Leaf({1.0});
  auto acc = x.grad_accumulator();
  EXPECT_EQ(acc, x.grad_accumulator());  // one persistent node
  std::vector<std::string> calls;
  acc->AddPostHook(
      [&](const Tensor& v) { calls.push_back("a:" + std::to_string(v.grad().item())); });
  auto middle = acc->AddPostHook([&](const Tensor&) { calls.push_back("b"); });
  acc->AddPostHook([&](const Tensor&) { calls.push_back("c"); });
  Tensor loss = Sum(MulScalar(x, 2.0));
  loss.Backward();
  EXPECT_EQ(calls, (std::vector<std::string>{"a:2.000000", "b", "c"}));

  EXPECT_TRUE(acc->RemovePostHook(middle));
  EXPECT_FALSE(acc->RemovePostHook(middle));
  calls.clear();
  loss.Backward();
  EXPECT_EQ(calls, (std::vector<std::string>{"a:4.000000", "c"}));
}

TEST(EngineTest, AccumulatorHooksFireLastLayerFirst) {
  // Gradients become ready in reverse order of use: the order DDP's buckets are built for. Within
  // a layer PyTorch's order: linear is addmm(bias, x, weight.t()), so the bias comes first.
  auto mlp = nn::MakeMlp({3, 4, 4, 2}, /*seed=*/1);
  std::vector<std::string> order;
  for (const auto& [name, p] : mlp->NamedParameters()) {
    p.grad_accumulator()->AddPostHook(
        [&order, name = name](const Tensor&) { order.push_back(name); });
  }
  Sum(mlp->Forward(Tensor::Full({2, 3}, 0.5))).Backward();
  EXPECT_EQ(order, (std::vector<std::string>{"4.bias", "4.weight", "2.bias", "2.weight", "0.bias",
                                             "0.weight"}));
}

TEST(EngineTest, ALinearsInputGradientRunsAfterItsWeightIsReady) {
  // dy W for an input that came out of another op runs in a node of its own on the x edge,
  // created just before TBackward: the weight's accumulator (DDP's hook) runs before it. A leaf
  // input keeps its accumulator on that edge, ready with the bias's, as PyTorch's.
  auto matrix = [](std::vector<double> v) {
    Tensor t = Tensor::FromVector<double>(v, {2, 2});
    t.set_requires_grad(true);
    return t;
  };
  Tensor w = matrix({1.0, 2.0, 3.0, 4.0});
  Tensor b = Leaf({0.5, -0.5});
  Tensor x = matrix({1.0, -1.0, 2.0, 0.5});
  Tensor h = MulScalar(x, 2.0);
  for (const Tensor& out : {Linear(h, w, b), LinearRelu(h, w, b)}) {
    const Node* to_x = out.grad_fn()->next_edges()[1].node.get();
    EXPECT_EQ(to_x->name(), "LinearInputBackward");
    EXPECT_EQ(to_x->next_edges()[0].node, h.grad_fn());
    EXPECT_GT(out.grad_fn()->next_edges()[2].node->priority(), to_x->priority());
  }
  EXPECT_EQ(Linear(x, w, b).grad_fn()->next_edges()[1].node, x.grad_accumulator());
  Sum(Linear(h, w, b)).Backward();  // d/dx = 2 * column sums of W, per row
  EXPECT_EQ(x.grad().ToDoubles(), (std::vector<double>{8.0, 12.0, 8.0, 12.0}));
}

TEST(EngineTest, CallbacksRunOnceAfterEveryHook) {
  auto mlp = nn::MakeMlp({3, 5, 2}, /*seed=*/1);
  int hooks_fired = 0;
  std::vector<int> seen_by_callbacks;
  for (const Tensor& p : mlp->Parameters()) {
    p.grad_accumulator()->AddPostHook([&](const Tensor&) {
      if (hooks_fired++ == 0) {
        // Queued by the first hook, as DDP's reducer does; it must see all four hooks.
        Engine::QueueCallback([&] {
          seen_by_callbacks.push_back(hooks_fired);
          Engine::QueueCallback([&] { seen_by_callbacks.push_back(-1); });  // chained
        });
      }
    });
  }
  Sum(mlp->Forward(Tensor::Full({2, 3}, 1.0))).Backward();
  EXPECT_EQ(hooks_fired, 4);
  EXPECT_EQ(seen_by_callbacks, (std::vector<int>{4, -1}));
  EXPECT_EQ(Engine::Depth(), 0);
}

TEST(EngineTest, QueueCallbackOutsideBackwardIsAnError) {
  EXPECT_THROW(Engine::QueueCallback([] {}), Error);
  EXPECT_THROW(Engine::QueueOuterCallback([] {}), Error);
}

// From inside a nested (checkpointed) pass, QueueCallback runs at the end of that pass and
// QueueOuterCallback at the end of the whole backward.
TEST(EngineTest, OuterCallbacksWaitForTheOutermostPass) {
  Tensor w = Leaf({2.0});
  Tensor x = Leaf({3.0});
  std::vector<std::string> events;
  w.grad_accumulator()->AddPostHook([&](const Tensor&) {
    events.push_back("hook at depth " + std::to_string(Engine::Depth()));
    if (events.size() == 1) {
      Engine::QueueCallback([&] { events.push_back("inner callback"); });
      Engine::QueueOuterCallback([&] { events.push_back("outer callback"); });
    }
  });
  auto layer = [&](const Tensor& in) { return Mul(in, w); };
  Tensor y = Checkpoint(layer, Checkpoint(layer, x));  // w fires once per nested pass
  Sum(y).Backward();
  EXPECT_EQ(events, (std::vector<std::string>{"hook at depth 2", "inner callback",
                                              "hook at depth 2", "outer callback"}));
}

TEST(EngineTest, ErrorsForRootsWithoutGradOrNonScalarWithoutSeed) {
  Tensor constant = Tensor::Full({2}, 1.0);
  EXPECT_THROW(Sum(constant).Backward(), Error);
  Tensor x = Leaf({1.0, 2.0});
  try {
    MulScalar(x, 2.0).Backward();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("only defined for one-element outputs"),
              std::string::npos);
  }
}

TEST(EngineTest, NoGradBuildsNoGraphAndDetachCutsHistory) {
  Tensor x = Leaf({1.0});
  {
    NoGradGuard no_grad;
    Tensor y = MulScalar(x, 2.0);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
  }
  EXPECT_TRUE(GradMode::IsEnabled());
  Tensor y = MulScalar(x, 2.0);
  EXPECT_TRUE(y.requires_grad());
  Tensor d = y.Detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.SharesStorageWith(y));
  EXPECT_THROW(Sum(d).Backward(), Error);
}

TEST(EngineTest, EachRankThreadHasItsOwnGradModeAndTasks) {
  NoGradGuard no_grad;
  bool enabled_in_thread = false;
  std::thread([&] { enabled_in_thread = GradMode::IsEnabled(); }).join();
  EXPECT_TRUE(enabled_in_thread);
}

}  // namespace
}  // namespace ddpkit
