// The storage counters behind activation-memory figures (autograd/memory_stats.h).
#include "autograd/memory_stats.h"

#include "autograd/checkpoint.h"
#include "autograd/nn/nn.h"
#include "autograd/ops.h"
#include "autograd/random.h"
#include "gtest/gtest.h"

namespace ddpkit {
namespace {

TEST(TensorMemoryTest, CountsLiveBytesAndTheirPeak) {
  const int64_t before = TensorMemory().live_bytes;
  ResetPeakTensorMemory();
  {
    Tensor a = Tensor::Empty({1000});                      // 4000 bytes
    Tensor b = Tensor::Empty({10, 100}, DType::kFloat64);  // 8000 bytes
    EXPECT_EQ(TensorMemory().live_bytes - before, 12000);
    Tensor view = b.Rows(0, 5);  // shares b's storage: no new bytes
    EXPECT_EQ(TensorMemory().live_bytes - before, 12000);
  }
  EXPECT_EQ(TensorMemory().live_bytes, before);
  EXPECT_EQ(TensorMemory().peak_bytes - before, 12000);
  ResetPeakTensorMemory();
  EXPECT_EQ(TensorMemory().peak_bytes, before);
}

// What the graph holds after forward: every layer's activations without checkpointing, only
// the checkpointed call's input with it — and the recomputation shows at the peak.
TEST(TensorMemoryTest, CheckpointingHoldsLessAfterForward) {
  Generator gen(3);
  nn::Linear expand(8, 256, true, gen), project(256, 8, true, gen);
  Tensor x = Tensor::Empty({32, 8});
  gen.FillNormal(x);
  x.set_requires_grad(true);
  auto block = [&](const Tensor& h) { return project.Forward(Relu(expand.Forward(h))); };
  int64_t held[2];
  for (const bool checkpoint : {false, true}) {
    const int64_t baseline = TensorMemory().live_bytes;
    Tensor loss = Sum(checkpoint ? Checkpoint(block, x) : block(x));
    held[checkpoint] = TensorMemory().live_bytes - baseline;
  }
  // Without: expand's output and the ReLU's (32 x 256 floats each) at least.
  EXPECT_GE(held[false], 2 * 32 * 256 * 4);
  EXPECT_LT(held[true], 32 * 256 * 4);
}

}  // namespace
}  // namespace ddpkit
