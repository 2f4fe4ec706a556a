// The checkpoint manifest: round trips, every malformed case as an error (never a crash), and
// the step folder names.
#include <random>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tools/checkpoint/checkpoint.h"
#include "tools/checkpoint/durable_file.h"

namespace ddpkit::checkpoint {
namespace {

CheckpointManifest Sample() {
  return {.step = 40,
          .files = {{.name = "state.json", .size = 312, .crc32 = 4294967295u},
                    {.name = "model.safetensors", .size = 0, .crc32 = 0}}};
}

TEST(CheckpointManifestTest, RoundTrips) {
  absl::StatusOr<CheckpointManifest> parsed =
      ParseCheckpointManifest(SerializeCheckpointManifest(Sample()));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->step, 40);
  ASSERT_EQ(parsed->files.size(), 2u);
  EXPECT_EQ(parsed->files[0].name, "state.json");
  EXPECT_EQ(parsed->files[0].size, 312u);
  EXPECT_EQ(parsed->files[0].crc32, 4294967295u);
  ASSERT_NE(parsed->Find("model.safetensors"), nullptr);
  EXPECT_EQ(parsed->Find("nope"), nullptr);
}

TEST(CheckpointManifestTest, MalformedManifestsAreDataLossSayingWhat) {
  const std::string files = R"("files": [{"name": "a", "size": 1, "crc32": 2}])";
  auto doc = [](const std::string& body) {
    return R"({"format": "ddpkit-checkpoint", "version": 1, "step": 4, )" + body + "}";
  };
  const std::pair<std::string, std::string> cases[] = {
      {"", "not valid JSON"},
      {"{", "not valid JSON"},
      {"[]", "not a JSON object"},
      {R"({"format": "other", "version": 1, "step": 1, "files": []})", "\"format\""},
      {R"({"format": "ddpkit-checkpoint", "version": 2, "step": 1, "files": []})", "version 2"},
      {R"({"format": "ddpkit-checkpoint", "version": 1, "step": -1, "files": []})", "\"step\""},
      {R"({"format": "ddpkit-checkpoint", "version": 1, "step": 1.5, "files": []})", "\"step\""},
      {R"({"format": "ddpkit-checkpoint", "version": 1, "files": []})", "no \"step\""},
      {doc(R"("files": {})"), "\"files\" is not an array"},
      {doc(R"("files": [3])"), "files[0] is not an object"},
      {doc(R"("files": [{"size": 1, "crc32": 2}])"), "no string name"},
      {doc(R"("files": [{"name": "../x", "size": 1, "crc32": 2}])"), "plain file name"},
      {doc(R"("files": [{"name": "a/b", "size": 1, "crc32": 2}])"), "plain file name"},
      {doc(R"("files": [{"name": "..", "size": 1, "crc32": 2}])"), "plain file name"},
      {doc(R"("files": [{"name": "", "size": 1, "crc32": 2}])"), "plain file name"},
      {doc(R"("files": [{"name": "MANIFEST.json", "size": 1, "crc32": 2}])"), "plain file name"},
      {doc(R"("files": [{"name": "a", "size": -1, "crc32": 2}])"), "\"size\""},
      {doc(R"("files": [{"name": "a", "size": 1, "crc32": 4294967296}])"), "\"crc32\""},
      {doc(R"("files": [{"name": "a", "size": 1}])"), "no \"crc32\""},
      {doc(files.substr(0, files.size() - 1) + R"(, {"name": "a", "size": 1, "crc32": 2}])"),
       "listed twice"},
      {std::string("{\"format\": \"ddpkit-checkpoint\0\"}", 31), "not valid JSON"},
  };
  for (const auto& [bytes, expected] : cases) {
    absl::StatusOr<CheckpointManifest> parsed = ParseCheckpointManifest(bytes);
    ASSERT_FALSE(parsed.ok()) << bytes;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss) << bytes;
    EXPECT_TRUE(absl::StrContains(parsed.status().message(), expected))
        << bytes << " -> " << parsed.status();
  }
  EXPECT_TRUE(ParseCheckpointManifest(doc(files)).ok());
}

// What the fuzzer will do, in small: damaged and truncated manifests and deep nesting give an
// answer, never a crash or an exception.
TEST(CheckpointManifestTest, AnyBytesGiveAnAnswer) {
  const std::string valid = SerializeCheckpointManifest(Sample());
  std::mt19937 rng(7);
  for (int i = 0; i < 3000; ++i) {
    std::string bytes = valid.substr(0, rng() % (valid.size() + 1));
    for (int flips = rng() % 4; flips > 0 && !bytes.empty(); --flips) {
      bytes[rng() % bytes.size()] = static_cast<char>(rng());
    }
    (void)ParseCheckpointManifest(bytes);
  }
  EXPECT_FALSE(ParseCheckpointManifest(std::string(100000, '[')).ok());
  EXPECT_FALSE(ParseCheckpointManifest(std::string(100000, '[') + std::string(100000, ']')).ok());
  EXPECT_FALSE(ParseCheckpointManifest("\xff\xfe\x00").ok());
}

TEST(CheckpointManifestTest, FolderNamesHaveOneSpellingPerStep) {
  EXPECT_EQ(CheckpointFolderName(40), "step-00000040");
  EXPECT_EQ(StepOfCheckpointFolder("step-00000040"), 40);
  EXPECT_EQ(StepOfCheckpointFolder("step-123456789"), 123456789);
  for (const char* name : {"step-40", "step-", "step-0000004x", "step--0000040", "step-+0000040",
                           ".tmp-step-00000040-12", "damaged-step-00000040", "step-000000040"}) {
    EXPECT_EQ(StepOfCheckpointFolder(name), std::nullopt) << name;
  }
}

TEST(CheckpointManifestTest, Crc32IsZlibs) {
  EXPECT_EQ(Crc32(""), 0u);
  EXPECT_EQ(Crc32("123456789"), 0xCBF43926u);  // the CRC-32 check value
}

}  // namespace
}  // namespace ddpkit::checkpoint
