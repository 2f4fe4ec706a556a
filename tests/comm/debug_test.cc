// DDPKIT_DEBUG's levels (TORCH_DISTRIBUTED_DEBUG's OFF, INFO, DETAIL).
#include "comm/debug.h"

#include "gtest/gtest.h"

namespace ddpkit::comm {
namespace {

TEST(DebugLevelTest, Parses) {
  EXPECT_EQ(*ParseDebugLevel("DETAIL"), DebugLevel::kDetail);
  EXPECT_EQ(*ParseDebugLevel("OFF"), DebugLevel::kOff);
  EXPECT_EQ(ParseDebugLevel("LOUD").status().message(),
            "debug level 'LOUD' is not one of OFF, INFO, DETAIL");
}

}  // namespace
}  // namespace ddpkit::comm
