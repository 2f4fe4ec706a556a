// Reentrant activation checkpointing, and the hook behaviour DDP has to cope with.
#include "autograd/checkpoint.h"

#include "autograd/accumulate_grad.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/nn/nn.h"
#include "autograd/ops.h"
#include "tests/autograd/test_util.h"

namespace ddpkit {
namespace {

using testing_util::AllClose;

// Counts each parameter's hook firings and the engine depth at which they fired, while alive.
struct HookCounter {
  explicit HookCounter(const nn::Module& module) {
    for (const auto& [name, p] : module.NamedParameters()) {
      auto accumulator = p.grad_accumulator();
      auto handle = accumulator->AddPostHook([this, name = name](const Tensor&) {
        ++fired[name];
        depths.push_back(Engine::Depth());
      });
      handles.emplace_back(accumulator, handle);
    }
  }
  ~HookCounter() {
    for (auto& [accumulator, handle] : handles) accumulator->RemovePostHook(handle);
  }
  std::map<std::string, int> fired;
  std::vector<int> depths;
  std::vector<std::pair<std::shared_ptr<AccumulateGrad>, AccumulateGrad::HookHandle>> handles;
};

TEST(CheckpointTest, GradientsEqualTheUncheckpointedModel) {
  auto reference = nn::MakeMlp({4, 6, 3}, /*seed=*/5, DType::kFloat64);
  auto checkpointed = nn::MakeMlp({4, 6, 3}, /*seed=*/5, DType::kFloat64);
  Tensor x = Tensor::Full({3, 4}, 0.3, DType::kFloat64);
  x.set_requires_grad(true);
  Tensor x2 = x.Detach();
  x2.set_requires_grad(true);

  Sum(Tanh(reference->Forward(x))).Backward();
  Sum(Tanh(Checkpoint([&](const Tensor& in) { return checkpointed->Forward(in); }, x2))).Backward();

  auto ref_params = reference->NamedParameters();
  auto ckpt_params = checkpointed->NamedParameters();
  for (size_t i = 0; i < ref_params.size(); ++i) {
    EXPECT_TRUE(AllClose(ckpt_params[i].second.grad(), ref_params[i].second.grad(), 1e-12))
        << ref_params[i].first;
  }
  EXPECT_TRUE(AllClose(x2.grad(), x.grad(), 1e-12));
}

TEST(CheckpointTest, HooksFireInsideTheNestedBackward) {
  Generator gen(1);
  auto layer = std::make_shared<nn::Linear>(3, 3, true, gen);
  HookCounter counter(*layer);
  Tensor x = Tensor::Full({2, 3}, 1.0);
  Sum(Checkpoint([&](const Tensor& in) { return layer->Forward(in); }, x)).Backward();
  EXPECT_EQ(counter.fired["weight"], 1);
  EXPECT_EQ(counter.fired["bias"], 1);
  EXPECT_EQ(counter.depths, (std::vector<int>{2, 2}));  // reentrant: depth 2
}

TEST(CheckpointTest, SameLayerCheckpointedTwiceFiresItsHooksTwice) {
  // Without checkpointing, a layer used twice accumulates both uses in the engine's buffer and
  // its accumulator runs once. Checkpointed twice, each recomputation is its own nested
  // backward: the accumulator runs twice. DDP calls this "marked ready twice".
  Generator gen(2);
  auto layer = std::make_shared<nn::Linear>(3, 3, true, gen);
  auto twice = [&](bool checkpoint) {
    HookCounter counter(*layer);
    Tensor h = Tensor::Full({2, 3}, 0.5);
    for (int i = 0; i < 2; ++i) {
      h = checkpoint ? Checkpoint([&](const Tensor& in) { return Tanh(layer->Forward(in)); }, h)
                     : Tanh(layer->Forward(h));
    }
    Sum(h).Backward();
    return counter.fired["weight"];
  };
  EXPECT_EQ(twice(/*checkpoint=*/false), 1);
  EXPECT_EQ(twice(/*checkpoint=*/true), 2);
}

TEST(CheckpointTest, ForwardRunsWithoutAGraphAndKeepsInputsIntact) {
  Tensor x = Tensor::Full({2}, 2.0);
  x.set_requires_grad(true);
  bool grad_enabled_in_forward = true;
  Tensor y = Checkpoint(
      [&](const Tensor& in) {
        if (Engine::Depth() == 0) grad_enabled_in_forward = GradMode::IsEnabled();
        return in;  // identity: the output must still be a new tensor with its own history
      },
      x);
  EXPECT_FALSE(grad_enabled_in_forward);
  EXPECT_TRUE(x.is_leaf());
  EXPECT_NE(y.grad_fn(), nullptr);
  Sum(y).Backward();
  EXPECT_EQ(x.grad().ToDoubles(), (std::vector<double>{1.0, 1.0}));
}

}  // namespace
}  // namespace ddpkit
