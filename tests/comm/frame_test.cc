// The store's frame decoder: whole frames, partial ones, and bytes no client would send.
#include "comm/store/frame.h"

#include "gtest/gtest.h"

namespace ddpkit::comm {
namespace {

TEST(FrameTest, EncodedFramesDecodeBackOneAtATime) {
  const std::string bytes = EncodeFrame("first") + EncodeFrame("") + EncodeFrame("third");
  std::string_view rest = bytes;
  std::vector<std::string> payloads;
  while (true) {
    absl::StatusOr<std::optional<Frame>> frame = DecodeFrame(rest);
    ASSERT_TRUE(frame.ok()) << frame.status();
    if (!frame->has_value()) break;
    payloads.emplace_back((*frame)->payload);
    rest.remove_prefix((*frame)->size);
  }
  EXPECT_EQ(payloads, (std::vector<std::string>{"first", "", "third"}));
  EXPECT_TRUE(rest.empty());
}

TEST(FrameTest, AnIncompleteFrameAsksForMore) {
  const std::string frame = EncodeFrame("payload");
  for (size_t n = 0; n < frame.size(); ++n) {
    absl::StatusOr<std::optional<Frame>> decoded =
        DecodeFrame(std::string_view(frame).substr(0, n));
    ASSERT_TRUE(decoded.ok()) << n;
    EXPECT_FALSE(decoded->has_value()) << n;
  }
}

TEST(FrameTest, ALengthOverTheLimitIsDataLoss) {
  const std::string huge("\xf0\xff\xff\xff", 4);
  absl::StatusOr<std::optional<Frame>> frame = DecodeFrame(huge);
  ASSERT_FALSE(frame.ok());
  EXPECT_EQ(frame.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(frame.status().message(), "frame of 4294967280 bytes exceeds the 16777216-byte limit");
  EXPECT_FALSE(DecodeFrame(EncodeFrame("12345"), 4).ok());
  EXPECT_TRUE(DecodeFrame(EncodeFrame("1234"), 4).ok());
}

TEST(FrameTest, RequestsMustParseAndNameAnOperation) {
  store::StoreRequest set;
  set.mutable_set()->set_key("k");
  absl::StatusOr<store::StoreRequest> decoded = DecodeRequest(set.SerializeAsString());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->set().key(), "k");
  EXPECT_EQ(DecodeRequest("").status().message(), "request has no known operation");
  EXPECT_EQ(DecodeRequest(std::string("\xff\xff\xff\xff\xff", 5)).status().message(),
            "a 5-byte frame is not a valid store request");
  EXPECT_FALSE(DecodeResponse(std::string("\xff\xff\xff\xff\xff", 5)).ok());
}

}  // namespace
}  // namespace ddpkit::comm
