// The classification data behind `ddpkit train` and `ddpkit join`.
#include "tools/jobs/dataset.h"

#include <unistd.h>

#include <fstream>

#include "absl/strings/match.h"
#include "autograd/nn/safetensors.h"
#include "gtest/gtest.h"
#include "tools/jobs/training.h"

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

const models::ModelIo kTokens{
    .row = {6}, .input_dtype = DType::kInt64, .classes = 5, .per_position = true};

TEST(DatasetTest, SyntheticTokenRowsAreWalksWhoseLabelIsTheNextToken) {
  ClassificationData data = MakeSyntheticData(8, kTokens, /*seed=*/3);
  ASSERT_EQ(data.x.shape(), (Shape{8, 6}));
  ASSERT_EQ(data.y.shape(), (Shape{8, 6}));
  std::vector<int64_t> next(5, -1);  // one permutation behind every row
  for (int64_t i = 0; i < 8 * 6; ++i) {
    const int64_t from = data.x.data<int64_t>()[i], to = data.y.data<int64_t>()[i];
    if (i % 6 < 5) {
      EXPECT_EQ(to, data.x.data<int64_t>()[i + 1]);
    }
    if (next[from] >= 0) {
      EXPECT_EQ(next[from], to) << "token " << from;
    }
    next[from] = to;
  }
}

TEST(DatasetTest, SyntheticImagesHaveTheModelsRowShape) {
  const models::ModelIo images{.row = {1, -1, -1}, .synthetic_row = {1, 8, 8}, .classes = 10};
  ClassificationData data = MakeSyntheticData(4, images, 0);
  EXPECT_EQ(data.x.shape(), (Shape{4, 1, 8, 8}));
  EXPECT_EQ(data.y.shape(), (Shape{4}));
  Tensor x = BatchInput(images, 3), y = BatchLabels(images, 3);
  GatherRows(data, 2, 3, x, y);
  EXPECT_EQ(x.Rows(0, 1).ToDoubles(), data.x.Rows(2, 3).ToDoubles());
}

// A file of its own per call: ctest runs this binary's tests as parallel processes, and two
// writing one shared name raced (a CI-like run read another test's text).
std::string WriteText(const std::string& text) {
  static int calls = 0;
  const std::string path = ::testing::TempDir() + "/dataset_test_" + std::to_string(::getpid()) +
                           "_" + std::to_string(calls++) + ".txt";
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(DatasetTest, TextIsReadAsSortedCharactersShiftedByOne) {
  const std::string path = WriteText("hello, w\xc3\xb6rld!");  // 13 characters, ö two bytes
  const models::ModelIo io{
      .row = {4}, .input_dtype = DType::kInt64, .classes = 12, .per_position = true};
  absl::StatusOr<ClassificationData> data = LoadTextData(path, io);
  ASSERT_TRUE(data.ok()) << data.status();
  const std::vector<std::string> vocabulary = {" ", "!", ",", "d", "e",       "h",
                                               "l", "o", "r", "w", "\xc3\xb6"};
  EXPECT_EQ(data->vocabulary, vocabulary);
  EXPECT_EQ(data->x.shape(), (Shape{3, 4}));  // (13 - 1) / 4 rows
  auto text_of = [&](const Tensor& t, int64_t row) {
    std::string out;
    for (int64_t i = 0; i < 4; ++i) out += vocabulary[t.data<int64_t>()[row * 4 + i]];
    return out;
  };
  EXPECT_EQ(text_of(data->x, 0), "hell");
  EXPECT_EQ(text_of(data->y, 0), "ello");
  EXPECT_EQ(text_of(data->x, 2), "\xc3\xb6rld");
  EXPECT_EQ(text_of(data->y, 2), "rld!");
}

TEST(DatasetTest, TextErrorsSayWhatToChange) {
  const models::ModelIo io{
      .row = {4}, .input_dtype = DType::kInt64, .classes = 3, .per_position = true};
  EXPECT_TRUE(absl::StrContains(LoadTextData(WriteText("abcdefgh"), io).status().message(),
                                "the text has 8 distinct characters but the model's vocabulary "
                                "is 3; use vocab=8 or more"));
  EXPECT_TRUE(absl::StrContains(LoadTextData(WriteText("ab\xff"
                                                       "b"),
                                             io)
                                    .status()
                                    .message(),
                                "byte 2 is not valid UTF-8"));
  EXPECT_TRUE(absl::StrContains(LoadTextData(WriteText("abab"), io).status().message(),
                                "4 characters are fewer than one row of 4 plus the one after it"));
  EXPECT_TRUE(absl::StrContains(
      LoadTextData(WriteText("abab"), {.row = {4}, .classes = 3}).status().message(),
      "does not take token rows"));
}

TEST(DatasetTest, TokenFilesAreCheckedAgainstTheVocabulary) {
  const std::string path = ::testing::TempDir() + "/dataset_tokens.safetensors";
  Tensor x = Tensor::Zeros({2, 6}, DType::kInt64), y = Tensor::Zeros({2, 6}, DType::kInt64);
  ASSERT_TRUE(WriteSafetensors(path, {{"x", x}, {"y", y}}).ok());
  EXPECT_TRUE(LoadClassificationData(path, kTokens).ok());
  x.data<int64_t>()[7] = 5;
  ASSERT_TRUE(WriteSafetensors(path, {{"x", x}, {"y", y}}).ok());
  EXPECT_TRUE(absl::StrContains(LoadClassificationData(path, kTokens).status().message(),
                                "tensor 'x' row 1 position 1 has token 5, outside the model's 5 "
                                "token ids [0, 5)"));
  ASSERT_TRUE(WriteSafetensors(path, {{"x", Tensor::Zeros({2, 6})}, {"y", y}}).ok());
  EXPECT_TRUE(absl::StrContains(LoadClassificationData(path, kTokens).status().message(),
                                "tensor 'x' must be int64 token ids [-1, 6]"));
  ASSERT_TRUE(WriteSafetensors(path, {{"x", Tensor::Zeros({2, 6}, DType::kInt64)},
                                      {"y", Tensor::Zeros({2}, DType::kInt64)}})
                  .ok());
  EXPECT_TRUE(absl::StrContains(LoadClassificationData(path, kTokens).status().message(),
                                "tensor 'y' must be int64 [2, 6]"));
}

TEST(DatasetTest, PerPositionLossIsTheMeanOverEveryPosition) {
  Tensor logits = Tensor::FromVector<float>({1, 2, 3, 0, 0, 1, 2, 2, 5, 1, 0, 0}, {2, 2, 3});
  Tensor labels = Tensor::FromVector<int64_t>({2, 0, 1, 0}, {2, 2});
  const double whole = TrainingLoss("ce", logits, labels).item();
  const double flat = TrainingLoss("ce", logits.View({4, 3}), labels.View({4})).item();
  EXPECT_DOUBLE_EQ(whole, flat);
}

}  // namespace
}  // namespace ddpkit::jobs
