// A collective's fingerprint: what DETAIL's cross-rank call check compares.
#include "comm/types.h"

#include "gtest/gtest.h"

namespace ddpkit::comm {
namespace {

TEST(FingerprintTest, EncodesAndDecodes) {
  CollectiveFingerprint f{.sequence_number = 9,
                          .op = OpType::kAllToAllV,
                          .dtype = DType::kBFloat16,
                          .input_numel = 5,
                          .output_numel = 7,
                          .counts = {1, 4},
                          .recv_counts = {3, 4}};
  std::vector<int64_t> words = f.Encode(2);
  CollectiveFingerprint g = CollectiveFingerprint::Decode(words.data(), 2);
  EXPECT_EQ(g.Describe(), f.Describe());
  EXPECT_EQ(g.recv_counts, f.recv_counts);
  EXPECT_EQ(g.sequence_number, 9u);
}

}  // namespace
}  // namespace ddpkit::comm
