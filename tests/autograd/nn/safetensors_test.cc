// safetensors reading, writing and state dicts — including every malformed-file case.
#include "autograd/nn/safetensors.h"

#include <unistd.h>

#include <filesystem>

#include "absl/strings/match.h"
#include "autograd/base/file_util.h"
#include "tests/autograd/test_util.h"

namespace ddpkit {
namespace {

namespace fs = std::filesystem;

// A safetensors byte string with the given header text and data section.
std::string RawFile(const std::string& header, const std::string& data = std::string(64, '\0'),
                    uint64_t header_length = UINT64_MAX) {
  uint64_t n = header_length == UINT64_MAX ? header.size() : header_length;
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i, n >>= 8) out[i] = static_cast<char>(n & 0xff);
  return out + header + data;
}

class TempDir {
 public:
  TempDir()
      : path_(fs::temp_directory_path() /
              ("ddpkit_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++))) {
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string File(const std::string& name) const { return (path_ / name).string(); }
  size_t Entries() const {
    return static_cast<size_t>(
        std::distance(fs::directory_iterator(path_), fs::directory_iterator()));
  }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

TEST(SafetensorsTest, RoundTripsEveryDtypeAndMetadata) {
  NamedTensors tensors = {
      {"w", Tensor::FromVector<float>({1.5f, -2.0f, 3.25f, 0.0f, 1e-7f, 8.0f}, {2, 3})},
      {"d", Tensor::FromVector<double>({3.141592653589793}, {1})},
      {"h", Tensor::FromVector<double>({0.5, -1.0}, {2}).To(DType::kFloat16)},
      {"b", Tensor::FromVector<double>({0.5, -1.0}, {2}).To(DType::kBFloat16)},
      {"i", Tensor::FromVector<int32_t>({-1, 7}, {2})},
      {"l", Tensor::FromVector<int64_t>({int64_t{1} << 40}, {1})},
      {"empty", Tensor::Zeros({0, 3})},
      {"scalar", Tensor::Scalar(2.0)},
  };
  std::string bytes = SerializeSafetensors(tensors, {{"format", "pt"}});
  const uint64_t header_length =
      static_cast<unsigned char>(bytes[0]) | (static_cast<unsigned char>(bytes[1]) << 8);
  EXPECT_EQ(header_length % 8, 0u);  // the data section starts 8-byte aligned
  absl::StatusOr<SafetensorsFile> file = ParseSafetensors(bytes, "mem");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata.at("format"), "pt");
  ASSERT_EQ(file->tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(file->tensors[i].first, tensors[i].first);
    const Tensor& got = file->tensors[i].second;
    EXPECT_EQ(got.dtype(), tensors[i].second.dtype());
    EXPECT_EQ(got.shape(), tensors[i].second.shape());
    EXPECT_EQ(got.ToDoubles(), tensors[i].second.ToDoubles()) << tensors[i].first;
  }
}

TEST(SafetensorsTest, ReadsFilesWrittenFromPyTorch) {
  SafetensorsFile file = testing_util::ReadGolden("torch_mlp_weights.safetensors");
  ASSERT_EQ(file.tensors.size(), 4u);
  EXPECT_EQ(file.metadata.at("format"), "pt");
  EXPECT_EQ(testing_util::Get(file, "0.weight").shape(), (Shape{8, 4}));
  EXPECT_EQ(testing_util::Get(file, "2.bias").dtype(), DType::kFloat32);
}

struct MalformedCase {
  std::string name;
  std::string bytes;
  std::string expected;  // a substring of the error
  friend void PrintTo(const MalformedCase& c, std::ostream* os) { *os << c.name; }
};

class SafetensorsMalformedTest : public testing::TestWithParam<MalformedCase> {};

TEST_P(SafetensorsMalformedTest, IsRejectedWithAClearError) {
  const MalformedCase& c = GetParam();
  absl::StatusOr<SafetensorsFile> file = ParseSafetensors(c.bytes, "bad.safetensors");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StartsWith(file.status().message(), "bad.safetensors: ")) << file.status();
  EXPECT_TRUE(absl::StrContains(file.status().message(), c.expected)) << file.status();
}

std::string Entry(const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return R"({"t":{"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":)" + offsets +
         "}}";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SafetensorsMalformedTest,
    testing::Values(
        MalformedCase{"too_short", "abc", "only 3 bytes"},
        MalformedCase{"huge_header", RawFile("{}", "", uint64_t{1} << 40),
                      "exceeds the 104857600-byte limit"},
        MalformedCase{"header_past_end", RawFile("{}", "", 1000),
                      "header length 1000 exceeds the 2 bytes"},
        MalformedCase{"bad_json", RawFile("{\"t\": [1,"), "header is not valid JSON"},
        // Found by tests/fuzz/safetensors_fuzz.cc: a number too large for a double made the JSON
        // parser throw out_of_range, which escaped the reader and ended the process.
        MalformedCase{"number_overflow", RawFile(R"({"t": 1e999})"), "header is not valid JSON"},
        MalformedCase{"not_object", RawFile("[1, 2]"), "header is not a JSON object"},
        MalformedCase{"entry_not_object", RawFile(R"({"t": 3})"),
                      "tensor 't' is not a JSON object"},
        MalformedCase{"missing_dtype", RawFile(R"({"t": {"shape": [1], "data_offsets": [0, 4]}})"),
                      "tensor 't' has no string \"dtype\""},
        MalformedCase{"unsupported_dtype", RawFile(Entry("F8_E4M3", "[1]", "[0,1]")),
                      "dtype \"F8_E4M3\", which ddpkit does not support"},
        MalformedCase{"negative_extent", RawFile(Entry("F32", "[-1]", "[0,4]")),
                      "shape entry -1 that is not a non-negative integer"},
        MalformedCase{"float_extent", RawFile(Entry("F32", "[1.5]", "[0,4]")), "shape entry 1.5"},
        MalformedCase{"huge_shape", RawFile(Entry("F32", "[4294967296,4294967296]", "[0,4]")),
                      "impossibly large shape"},
        MalformedCase{"missing_offsets", RawFile(R"({"t": {"dtype": "F32", "shape": [1]}})"),
                      "needs \"data_offsets\""},
        MalformedCase{"backwards_offsets", RawFile(Entry("F32", "[1]", "[8,4]")), "run backwards"},
        MalformedCase{"size_mismatch", RawFile(Entry("F32", "[2,2]", "[0,12]")),
                      "is F32[2, 2] (16 bytes) but its data_offsets span 12 bytes"},
        MalformedCase{"past_data", RawFile(Entry("F64", "[16]", "[0,128]")),
                      "beyond the 64-byte data section"},
        MalformedCase{"overlap",
                      RawFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})"),
                      "tensors 'a' and 'b' overlap"},
        MalformedCase{"metadata_not_string", RawFile(R"({"__metadata__": {"k": 1}})"),
                      "__metadata__ value for 'k' is not a string"}),
    [](const testing::TestParamInfo<MalformedCase>& info) { return info.param.name; });

TEST(SafetensorsTest, MissingFileNamesThePath) {
  absl::StatusOr<SafetensorsFile> file = ReadSafetensors("/nonexistent/w.safetensors");
  ASSERT_FALSE(file.ok());
  EXPECT_TRUE(absl::StrContains(file.status().message(), "/nonexistent/w.safetensors"));
}

TEST(SafetensorsTest, WritesAtomicallyAndLeavesNoTemporaryFiles) {
  TempDir dir;
  const std::string path = dir.File("w.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"x", Tensor::Full({3}, 1.0)}}).ok());
  ASSERT_TRUE(WriteSafetensors(path, {{"x", Tensor::Full({3}, 2.0)}}).ok());
  EXPECT_EQ(dir.Entries(), 1u);
  EXPECT_EQ(ReadSafetensors(path)->tensors[0].second.ToDoubles(), (std::vector<double>{2, 2, 2}));

  // A write that cannot complete leaves the old file as it was.
  absl::Status failed = WriteFileAtomically(dir.File("missing_dir/w.safetensors"), "x");
  EXPECT_FALSE(failed.ok());
  EXPECT_TRUE(absl::StrContains(failed.message(), "missing_dir/w.safetensors")) << failed;
  EXPECT_EQ(dir.Entries(), 1u);
}

TEST(SafetensorsTest, StateDictRoundTripIntoAFreshModel) {
  TempDir dir;
  auto a = nn::MakeMlp({3, 4, 2}, /*seed=*/1);
  auto b = nn::MakeMlp({3, 4, 2}, /*seed=*/2);
  ASSERT_TRUE(SaveStateDict(*a, dir.File("a.safetensors")).ok());
  ASSERT_TRUE(LoadStateDict(*b, dir.File("a.safetensors")).ok());
  for (size_t i = 0; i < a->Parameters().size(); ++i) {
    EXPECT_EQ(a->Parameters()[i].ToDoubles(), b->Parameters()[i].ToDoubles());
  }
}

TEST(SafetensorsTest, StateDictMismatchesNameTheFileAndTensorAndChangeNothing) {
  TempDir dir;
  auto model = nn::MakeMlp({3, 4, 2}, /*seed=*/1);
  const std::vector<double> before = model->Parameters()[0].ToDoubles();

  auto other_shape = nn::MakeMlp({3, 5, 2}, /*seed=*/1);
  ASSERT_TRUE(SaveStateDict(*other_shape, dir.File("shape.safetensors")).ok());
  absl::Status status = LoadStateDict(*model, dir.File("shape.safetensors"));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(),
                                "shape.safetensors: tensor '0.weight' has shape [5, 3] but the "
                                "model's parameter has shape [4, 3]"))
      << status;

  ASSERT_TRUE(
      WriteSafetensors(dir.File("missing.safetensors"), {{"0.weight", Tensor::Zeros({4, 3})}})
          .ok());
  status = LoadStateDict(*model, dir.File("missing.safetensors"));
  EXPECT_TRUE(absl::StrContains(status.message(),
                                "missing tensors for the model: 0.bias, 2.weight, 2.bias"))
      << status;

  NamedTensors extra = model->NamedParameters();
  extra.emplace_back("head.weight", Tensor::Zeros({1}));
  ASSERT_TRUE(WriteSafetensors(dir.File("extra.safetensors"), extra).ok());
  status = LoadStateDict(*model, dir.File("extra.safetensors"));
  EXPECT_TRUE(absl::StrContains(status.message(), "tensors the model does not have: head.weight"))
      << status;

  EXPECT_EQ(model->Parameters()[0].ToDoubles(), before);
}

// A tied weight (mlp:...,tied=1: "4.weight" is "2.weight") loads from a file that lists it
// under its first name, under its other name (as a model that lists it there saved it), or
// under both (as PyTorch's state_dict does); a wrong shape under either name is refused.
TEST(SafetensorsTest, ATiedWeightLoadsUnderAnyOfItsNames) {
  TempDir dir;
  nn::MlpSpec spec{.widths = {3, 4, 4, 4, 2}, .tied = true};
  auto source = nn::MakeMlp(spec, /*seed=*/1);
  const NamedTensors aliases = source->NamedParameterAliases();
  ASSERT_EQ(aliases.size(), 1u);
  EXPECT_EQ(aliases[0].first, "4.weight");
  const Tensor tied = aliases[0].second;
  NamedTensors first = source->NamedParameters(), other, both = first;
  both.push_back(aliases[0]);
  for (const auto& [name, t] : first) other.emplace_back(name == "2.weight" ? "4.weight" : name, t);
  for (const auto& [file, tensors] : std::vector<std::pair<std::string, NamedTensors>>{
           {"first", first}, {"other", other}, {"both", both}}) {
    ASSERT_TRUE(WriteSafetensors(dir.File(file), tensors).ok());
    auto model = nn::MakeMlp(spec, /*seed=*/2);
    absl::Status status = LoadStateDict(*model, dir.File(file));
    ASSERT_TRUE(status.ok()) << file << ": " << status;
    EXPECT_EQ(model->NamedParameterAliases()[0].second.ToDoubles(), tied.ToDoubles()) << file;
  }
  both.back().second = Tensor::Zeros({4, 5});
  ASSERT_TRUE(WriteSafetensors(dir.File("bad"), both).ok());
  auto model = nn::MakeMlp(spec, /*seed=*/2);
  EXPECT_TRUE(absl::StrContains(LoadStateDict(*model, dir.File("bad")).message(),
                                "tensor '4.weight' has shape [4, 5]"));
}

}  // namespace
}  // namespace ddpkit
