// The classification data behind `ddpkit train` and `ddpkit join`.
#include "tools/jobs/dataset.h"

#include "gtest/gtest.h"

namespace ddpkit::jobs {
namespace {

TEST(DatasetTest, GatherRowsWrapsAround) {
  ClassificationData data = MakeSyntheticClassification(5, 2, 2, /*seed=*/1);
  Tensor x = Tensor::Empty({7, 2}), y = Tensor::Empty({7}, DType::kInt64);
  GatherRows(data, 3, 7, x, y);  // rows 3, 4, 0, 1, 2, 3, 4
  const int64_t expected[] = {3, 4, 0, 1, 2, 3, 4};
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(y.data<int64_t>()[i], data.y.data<int64_t>()[expected[i]]);
    EXPECT_EQ(x.Rows(i, i + 1).ToDoubles(), data.x.Rows(expected[i], expected[i] + 1).ToDoubles());
  }
}

}  // namespace
}  // namespace ddpkit::jobs
