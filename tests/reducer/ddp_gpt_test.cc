// DDP over nanoGPT's GPT (autograd/nn/models/gpt.h) against PyTorch 1.13 DDP: the goldens of
// tools/scripts/golden/make_gpt_golden.py (gpt:layers=2,heads=2,dim=8,ctx=8,vocab=11, B = 2,
// T = 6, float64).
#include "autograd/nn/models/gpt.h"
#include "autograd/nn/safetensors.h"
#include "tests/autograd/test_util.h"
#include "tests/reducer/ddp_test_util.h"

namespace ddpkit::reducer::testing {
namespace {

using testing_util::Get;
using testing_util::ReadGolden;
using testing_util::TestDataPath;

std::shared_ptr<models::Gpt> GoldenGpt() {
  auto model = models::MakeGpt(*models::ParseGptSpec("gpt:layers=2,heads=2,dim=8,ctx=8,vocab=11"),
                               /*seed=*/1, DType::kFloat64);
  absl::Status loaded = LoadStateDict(*model, TestDataPath("torch_gpt_weights.safetensors"));
  EXPECT_TRUE(loaded.ok()) << loaded;
  return model;
}

// Rank r holds sequence r of the golden batch: DDP's averaged gradients are those of the
// mean loss over the whole batch, PyTorch's; and the order the first iteration's gradients
// were ready in, logged at the rebuild, is PyTorch DDP's prev_iteration_grad_ready_order_indices
// (the tied wte/lm_head weight's hook firing once, last).
TEST(DdpGptTest, GradientsAndReadyOrderArePyTorchDdps) {
  SafetensorsFile golden = ReadGolden("torch_gpt_case.safetensors");
  std::string expected_order;
  for (double i : Get(golden, "ready_order").ToDoubles()) {
    absl::StrAppend(&expected_order, expected_order.empty() ? "" : ", ", static_cast<int>(i));
  }
  RunWorld(2, [&](comm::ProcessGroup& group) {
    auto model = GoldenGpt();
    auto ddp = MakeDdp(model, group);
    const int64_t r = group.rank();
    const Tensor idx = Get(golden, "idx").Rows(r, r + 1).Clone();
    const Tensor targets = Get(golden, "targets").Rows(r, r + 1).Clone();
    models::GptLoss(ddp->Forward(idx), targets).Backward();
    for (const auto& [name, p] : model->NamedParameters()) {
      EXPECT_TRUE(testing_util::AllClose(p.grad(), Get(golden, "grad." + name), 1e-10, 1e-12))
          << name;
    }
    models::GptLoss(ddp->Forward(idx), targets).Backward();
    EXPECT_EQ(ddp->LoggingData().pytorch().prev_iteration_grad_ready_order_indices(),
              expected_order);
  });
}

}  // namespace
}  // namespace ddpkit::reducer::testing
