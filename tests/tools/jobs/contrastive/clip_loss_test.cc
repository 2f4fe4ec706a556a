// The CLIP loss in both layouts: labels that follow the real row counts, and the local layout's
// shares averaging to the global loss.
#include "tools/jobs/contrastive/clip_loss.h"

#include <mutex>

#include "autograd/ops.h"
#include "autograd/random.h"
#include "comm/threads/threads_world.h"
#include "gtest/gtest.h"

namespace ddpkit::jobs {
namespace {

using comm::ProcessGroup;
using comm::RunThreadsWorld;

Tensor Random(int64_t rows, int64_t cols, uint64_t seed) {
  Tensor t = Tensor::Empty({rows, cols}, DType::kFloat64);
  Generator gen(seed);
  gen.FillNormal(t);
  return t;
}

// Labels come from the actual row counts: with 1, 4 and 2 rows the offsets are 0, 1, 5 and the
// local-layout loss still averages to the global one.
TEST(ContrastiveLossTest, LabelOffsetsFollowUnequalRowCounts) {
  const std::vector<int64_t> rows = {1, 4, 2};
  std::vector<Tensor> images, texts;
  for (int r = 0; r < 3; ++r) {
    images.push_back(L2NormalizeRows(Random(rows[r], 5, 10 + r)));
    texts.push_back(L2NormalizeRows(Random(rows[r], 5, 20 + r)));
  }
  const Tensor scale = Tensor::Full({1}, 1.5, DType::kFloat64);
  double global_loss = 0;
  ASSERT_TRUE(RunThreadsWorld(1, [&](ProcessGroup& one) {
                global_loss = ClipLoss(Concat(images), Concat(texts), scale, one,
                                       ContrastiveLayout::kGlobalGlobal)
                                  .loss.item();
                return absl::OkStatus();
              }).ok());
  std::mutex mu;
  double local_sum = 0;
  std::vector<int64_t> offsets(3);
  ASSERT_TRUE(RunThreadsWorld(3, [&](ProcessGroup& group) {
                const int r = group.rank();
                ClipLossResult local =
                    ClipLoss(images[r], texts[r], scale, group, ContrastiveLayout::kLocalGlobal);
                ClipLossResult global =
                    ClipLoss(images[r], texts[r], scale, group, ContrastiveLayout::kGlobalGlobal);
                EXPECT_NEAR(global.loss.item(), global_loss, 1e-12);
                EXPECT_EQ(local.global_rows, 7);
                EXPECT_EQ(local.logit_elements, 2 * rows[r] * 7);
                EXPECT_EQ(global.logit_elements, 49);
                std::lock_guard<std::mutex> lock(mu);
                local_sum += local.loss.item();
                offsets[r] = local.first_row;
                return absl::OkStatus();
              }).ok());
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 1, 5}));
  EXPECT_NEAR(local_sum / 3, global_loss, 1e-12);  // DDP's average of the ranks' shares
}

}  // namespace
}  // namespace ddpkit::jobs
