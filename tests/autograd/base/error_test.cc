#include "autograd/base/error.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ddpkit {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Throws what `fn` throws as an Error, or fails the test.
template <typename Fn>
Error Caught(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "nothing was thrown";
  return Error("");
}

TEST(ErrorTest, CheckThrowsInvalidArgumentWithTheMessage) {
  const Error e = Caught([] { DDPKIT_CHECK(1 + 1 == 3, "[op] expected ", 3, ", got ", 2); });
  EXPECT_EQ(e.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_STREQ(e.what(), "[op] expected 3, got 2");
}

TEST(ErrorTest, InternalCheckThrowsInternalNamingTheBugAndWhere) {
  const int line = __LINE__ + 1;
  const Error e = Caught([] { DDPKIT_INTERNAL_CHECK(false, "[ddp] ", 2, " bucket(s) left"); });
  EXPECT_EQ(e.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(e.what(), StartsWith(StrCat("[ddpkit bug] tests/autograd/base/error_test.cc:", line,
                                          ": [ddp] 2 bucket(s) left")));
  EXPECT_THAT(e.what(), HasSubstr("an invariant of ddpkit itself broke; please report it"));
  EXPECT_EQ(e.ToStatus().code(), absl::StatusCode::kInternal);
}

TEST(ErrorTest, ChecksThatHoldEvaluateNoMessage) {
  int evaluated = 0;
  auto part = [&evaluated] { return ++evaluated; };
  DDPKIT_CHECK(true, part());
  DDPKIT_INTERNAL_CHECK(true, part());
  EXPECT_EQ(evaluated, 0);
}

TEST(ErrorTest, InternalCheckMessageKeepsTheFileAsTheRepositoryNamesIt) {
  EXPECT_THAT(InternalCheckMessage("/work/src/reducer/reducer.cc", 7, "x"),
              StartsWith("[ddpkit bug] reducer/reducer.cc:7: x"));
  EXPECT_THAT(InternalCheckMessage("../autograd/base/error.cc", 7, "x"),
              StartsWith("[ddpkit bug] autograd/base/error.cc:7: x"));
  EXPECT_THAT(InternalCheckMessage("/src/tests/comm/work_test.cc", 7, "x"),
              StartsWith("[ddpkit bug] tests/comm/work_test.cc:7: x"));
  EXPECT_THAT(InternalCheckMessage("reducer.cc", 7, "x"),
              StartsWith("[ddpkit bug] reducer.cc:7: x"));
}

TEST(ErrorTest, ThrowStatusKeepsCodeAndMessage) {
  const Error e = Caught([] { ThrowStatus(absl::DeadlineExceededError("rank 1 did not arrive")); });
  EXPECT_EQ(e.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(e.ToStatus(), absl::DeadlineExceededError("rank 1 did not arrive"));
}

}  // namespace
}  // namespace ddpkit
