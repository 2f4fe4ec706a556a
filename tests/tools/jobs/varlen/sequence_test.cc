// The data and the model of `ddpkit varlen`: synthetic sequences, the safetensors loader and its
// errors, the padded batch, and a model whose output and gradients ignore the padding.
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "autograd/nn/safetensors.h"
#include "autograd/ops.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/autograd/cuda_test_util.h"
#include "tests/autograd/test_util.h"
#include "tools/jobs/varlen/sequence_data.h"
#include "tools/jobs/varlen/sequence_model.h"

namespace ddpkit::jobs {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::vector<int64_t> Values(const Tensor& t) {
  const Tensor host = t.To(Device::Cpu());
  return {host.data<int64_t>(), host.data<int64_t>() + host.numel()};
}

Tensor Int64s(const std::vector<int64_t>& values) {
  return Tensor::FromVector<int64_t>(values, {std::ssize(values)});
}

// --- synthetic data ---------------------------------------------------------------------

TEST(SyntheticSequencesTest, TheSeedFixesTheData) {
  const SyntheticSequenceOptions options{.samples = 300, .seed = 11};
  const SequenceData a = MakeSyntheticSequences(options), b = MakeSyntheticSequences(options);
  EXPECT_EQ(Values(a.lengths), Values(b.lengths));
  EXPECT_EQ(Values(a.tokens), Values(b.tokens));
  EXPECT_EQ(Values(a.labels), Values(b.labels));
  EXPECT_EQ(a.offsets, b.offsets);
  const SequenceData c = MakeSyntheticSequences({.samples = 300, .seed = 12});
  EXPECT_NE(Values(a.lengths), Values(c.lengths));
  EXPECT_NE(Values(a.labels), Values(c.labels));
}

TEST(SyntheticSequencesTest, LengthsAreInRangeWithALongTail) {
  const SequenceData data =
      MakeSyntheticSequences({.samples = 4096, .min_length = 4, .max_length = 256, .seed = 3});
  std::vector<int64_t> lengths = Values(data.lengths);
  ASSERT_EQ(data.samples(), 4096);
  ASSERT_EQ(std::ssize(data.offsets), 4097);
  EXPECT_EQ(data.offsets.back(), data.tokens.numel());
  for (int64_t id = 0; id < data.samples(); ++id) EXPECT_EQ(data.length(id), lengths[id]);
  std::sort(lengths.begin(), lengths.end());
  EXPECT_EQ(lengths.front(), 4);   // the clip at min catches the short end
  EXPECT_GE(lengths.back(), 200);  // the tail reaches (nearly) max
  EXPECT_LE(lengths.back(), 256);
  const int64_t median = lengths[lengths.size() / 2];
  EXPECT_GE(median, 6);  // a quarter of the way up on a log scale: about 11
  EXPECT_LE(median, 20);
  EXPECT_GE(lengths[lengths.size() * 99 / 100], 64);  // a long tail, not a cluster
}

TEST(SyntheticSequencesTest, EqualMinAndMaxGiveOneLength) {
  const SequenceData data =
      MakeSyntheticSequences({.samples = 50, .min_length = 7, .max_length = 7});
  for (int64_t length : Values(data.lengths)) EXPECT_EQ(length, 7);
  EXPECT_THROW(MakeSyntheticSequences({.min_length = 8, .max_length = 7}), Error);
  EXPECT_THROW(MakeSyntheticSequences({.min_length = 0}), Error);
  EXPECT_THROW(MakeSyntheticSequences({.classes = 0}), Error);
}

TEST(SyntheticSequencesTest, LabelsAreEachSamplesMajorityClass) {
  const SequenceData data =
      MakeSyntheticSequences({.samples = 500, .vocab = 37, .classes = 5, .seed = 9});
  const std::vector<int64_t> tokens = Values(data.tokens), labels = Values(data.labels);
  std::vector<int64_t> per_class(5, 0);
  for (int64_t id = 0; id < data.samples(); ++id) {
    std::vector<int64_t> counts(5, 0);
    for (int64_t t = data.offsets[id]; t < data.offsets[id + 1]; ++t) {
      ASSERT_GE(tokens[t], 0);
      ASSERT_LT(tokens[t], 37);
      ++counts[tokens[t] % 5];
    }
    const int64_t expected = std::max_element(counts.begin(), counts.end()) - counts.begin();
    EXPECT_EQ(labels[id], expected) << "sample " << id;
    ++per_class[labels[id]];
  }
  for (int64_t c = 0; c < 5; ++c) EXPECT_GT(per_class[c], 0) << "class " << c;
}

// --- loading ----------------------------------------------------------------------------

class LoadSequenceDataTest : public ::testing::Test {
 protected:
  // tokens [9], lengths {2, 4, 3}, labels {1, 0, 2}: valid for vocab 10, 3 classes.
  NamedTensors Valid() const {
    return {{"tokens", Int64s({1, 2, 3, 4, 5, 6, 7, 8, 9})},
            {"lengths", Int64s({2, 4, 3})},
            {"labels", Int64s({1, 0, 2})}};
  }
  // Writes `tensors` and loads them; the file is removed by TearDown.
  absl::StatusOr<SequenceData> Load(const NamedTensors& tensors, int64_t vocab = 10,
                                    int64_t classes = 3) {
    const absl::Status written = WriteSafetensors(path_, tensors);
    EXPECT_TRUE(written.ok()) << written;
    return LoadSequenceData(path_, vocab, classes);
  }
  // `tensors` with `name` replaced by `value` (or dropped when value is undefined).
  NamedTensors With(const std::string& name, const Tensor& value) const {
    NamedTensors out;
    for (const auto& [n, t] : Valid()) {
      if (n != name) out.emplace_back(n, t);
    }
    if (value.defined()) out.emplace_back(name, value);
    return out;
  }
  void ExpectInvalid(const NamedTensors& tensors, const std::string& tensor,
                     const std::string& detail) {
    absl::StatusOr<SequenceData> data = Load(tensors);
    ASSERT_FALSE(data.ok());
    EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(data.status().message()),
                AllOf(StartsWith(path_ + ": "), HasSubstr("'" + tensor + "'"), HasSubstr(detail)));
  }
  void TearDown() override { ::unlink(path_.c_str()); }

  const std::string path_ =
      ::testing::TempDir() + "/varlen_sequences_" + std::to_string(::getpid()) + ".safetensors";
};

TEST_F(LoadSequenceDataTest, RoundTripsThroughASafetensorsFile) {
  const SequenceData synthetic =
      MakeSyntheticSequences({.samples = 64, .vocab = 20, .classes = 4, .seed = 5});
  absl::StatusOr<SequenceData> loaded = Load(
      {{"tokens", synthetic.tokens}, {"lengths", synthetic.lengths}, {"labels", synthetic.labels}},
      20, 4);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(Values(loaded->tokens), Values(synthetic.tokens));
  EXPECT_EQ(Values(loaded->lengths), Values(synthetic.lengths));
  EXPECT_EQ(Values(loaded->labels), Values(synthetic.labels));
  EXPECT_EQ(loaded->offsets, synthetic.offsets);
  EXPECT_EQ(loaded->vocab, 20);
  EXPECT_EQ(loaded->classes, 4);
  EXPECT_EQ(loaded->description, path_);
}

TEST_F(LoadSequenceDataTest, EachRuleNamesTheTensorAndTheFirstBadIndex) {
  ExpectInvalid(With("labels", Tensor()), "labels",
                "a sequence file needs int64 tensors 'tokens' [T], 'lengths' [N] and 'labels' [N]");
  ExpectInvalid(With("tokens", Tensor::Zeros({9})), "tokens",
                "must be int64 and 1-D, got float32[9]");
  ExpectInvalid(With("lengths", Tensor::Zeros({3, 1}, DType::kInt64)), "lengths",
                "must be int64 and 1-D, got int64[3, 1]");
  ExpectInvalid({{"tokens", Int64s({})}, {"lengths", Int64s({})}, {"labels", Int64s({})}},
                "lengths", "holds no samples");
  ExpectInvalid(With("labels", Int64s({1, 0})), "labels", "has 2 entries but 'lengths' has 3");
  ExpectInvalid(With("lengths", Int64s({2, 0, 7})), "lengths", "sample 1 has length 0");
  ExpectInvalid(With("lengths", Int64s({2, 4, -3})), "lengths", "sample 2 has length -3");
  ExpectInvalid(With("lengths", Int64s({2, 4, 4})), "lengths",
                "sample 2 (length 4) ends past the 9 tokens of 'tokens'");
  ExpectInvalid(With("lengths", Int64s({2, 4, 2})), "lengths",
                "sums to 8 but 'tokens' holds 9 tokens");
  ExpectInvalid(With("tokens", Int64s({1, 2, 3, 4, 5, 10, 7, 8, 11})), "tokens",
                "position 5 (sample 1) has token 10, outside the model's vocabulary [0, 10)");
  ExpectInvalid(With("tokens", Int64s({1, 2, 3, 4, 5, 6, 7, 8, -1})), "tokens",
                "position 8 (sample 2) has token -1");
  ExpectInvalid(With("labels", Int64s({1, 3, 5})), "labels",
                "sample 1 has label 3, outside the model's 3 classes [0, 3)");
}

TEST_F(LoadSequenceDataTest, AnUnreadableFileIsTheReadersError) {
  absl::StatusOr<SequenceData> data = LoadSequenceData(path_ + ".missing", 10, 3);
  ASSERT_FALSE(data.ok());
  EXPECT_THAT(std::string(data.status().message()), HasSubstr(path_ + ".missing"));
}

// --- batches ----------------------------------------------------------------------------

TEST_F(LoadSequenceDataTest, PackBatchPadsEachRowToTheLongest) {
  absl::StatusOr<SequenceData> data = Load(Valid());
  ASSERT_TRUE(data.ok()) << data.status();
  const Tensor batch = PackBatch(*data, {2, 0, 1});
  ASSERT_EQ(batch.shape(), (Shape{3, 5}));                       // the longest sample has 4 tokens
  EXPECT_EQ(Values(batch), (std::vector<int64_t>{3, 7, 8, 9, 0,  //
                                                 2, 1, 2, 0, 0,  //
                                                 4, 3, 4, 5, 6}));
  EXPECT_EQ(Values(BatchLabels(*data, {2, 0, 1})), (std::vector<int64_t>{2, 1, 0}));
  EXPECT_EQ(Values(PackBatch(*data, {0})), (std::vector<int64_t>{2, 1, 2}));
  EXPECT_THROW(PackBatch(*data, {3}), Error);
  EXPECT_THROW(BatchLabels(*data, {-1}), Error);
}

// --- the model --------------------------------------------------------------------------

TEST(SequenceModelSpecTest, ParsesWithAndWithoutHiddenWidths) {
  absl::StatusOr<SequenceModelSpec> spec = ParseSequenceModelSpec("seq:512,32,64,16,8");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->vocab, 512);
  EXPECT_EQ(spec->dim, 32);
  EXPECT_EQ(spec->hidden, (std::vector<int64_t>{64, 16}));
  EXPECT_EQ(spec->classes, 8);
  spec = ParseSequenceModelSpec("seq:5,4,3");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->hidden.empty());
  EXPECT_EQ(spec->classes, 3);
}

TEST(SequenceModelSpecTest, MalformedSpecsNameTheFlagAndShowAnExample) {
  const std::pair<std::string, std::string> cases[] = {
      {"mlp:32,64,10", "is not a sequence model"},
      {"seq:", "width '', not a positive integer"},
      {"seq:5,4", "needs at least a vocabulary, an embedding width and a class count"},
      {"seq:5,x,3", "width 'x', not a positive integer"},
      {"seq:5,0,3", "width '0', not a positive integer"},
      {"seq:5,4,-3", "width '-3', not a positive integer"},
      {"seq:5,4,,3", "width '', not a positive integer"},
      {"seq:9223372036854775807,2,2", "parameters; use smaller widths"},
      {"seq:4,3000000000,3000000000,2", "parameters; use smaller widths"},
  };
  for (const auto& [text, detail] : cases) {
    absl::StatusOr<SequenceModelSpec> spec = ParseSequenceModelSpec(text);
    ASSERT_FALSE(spec.ok()) << text;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(spec.status().message()),
                AllOf(StartsWith("--model '" + text + "' "), HasSubstr(detail),
                      HasSubstr("e.g. seq:512,32,64,8")));
  }
}

TEST(SequenceClassifierTest, ParametersAreNamedAndSeededInOrder) {
  SequenceClassifier model({.vocab = 7, .dim = 4, .hidden = {5}, .classes = 3}, /*seed=*/21);
  std::vector<std::string> names;
  for (const auto& [name, tensor] : model.NamedParameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"embedding.weight", "mlp.0.weight", "mlp.0.bias",
                                             "mlp.2.weight", "mlp.2.bias"}));
  // One generator: the embedding's draws, then each Linear's.
  Generator gen(21);
  nn::Embedding embedding(7, 4, gen);
  nn::Linear first(4, 5, /*bias=*/true, gen), second(5, 3, /*bias=*/true, gen);
  const TensorList expected = {embedding.weight(), first.weight(), first.bias(), second.weight(),
                               second.bias()};
  const TensorList params = model.Parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].ToDoubles(), expected[i].ToDoubles()) << names[i];
  }
  SequenceClassifier direct({.vocab = 7, .dim = 4, .hidden = {}, .classes = 3}, 21);
  EXPECT_EQ(direct.NamedParameters().size(), 3u);  // embedding, then one Linear D -> C
  EXPECT_EQ(direct.Forward(Int64s({2, 5, 6, 0}).View({1, 4})).shape(), (Shape{1, 3}));
}

// Sample 0 (3 tokens) and sample 1 (40 tokens), none of them token 0 (the padding's id).
SequenceData ShortAndLong() {
  std::vector<int64_t> tokens;
  for (int64_t t = 0; t < 43; ++t) tokens.push_back(1 + (t * 7) % 19);
  SequenceData data;
  data.tokens = Int64s(tokens);
  data.lengths = Int64s({3, 40});
  data.labels = Int64s({2, 1});
  data.offsets = {0, 3, 43};
  data.vocab = 20;
  data.classes = 4;
  return data;
}

struct SampleResult {
  Tensor logits;              // the short sample's row
  std::vector<Tensor> grads;  // each parameter's gradient of its loss
};

// The short sample's logits and gradients, from a batch of `ids` whose first is sample 0.
SampleResult RunShortSample(SequenceClassifier& model, const SequenceData& data,
                            const std::vector<int64_t>& ids) {
  for (const Tensor& p : model.Parameters()) p.set_grad(Tensor());
  const Tensor logits = Slice(model.Forward(PackBatch(data, ids)), 0, 1);
  CrossEntropy(logits, BatchLabels(data, {0})).Backward();
  SampleResult result{logits.Detach(), {}};
  for (const Tensor& p : model.Parameters()) result.grads.push_back(p.grad());
  return result;
}

// Each row's logits are the MLP of the mean of its own tokens' embeddings, computed here
// sample by sample without padding.
TEST(SequenceClassifierTest, ForwardIsTheMlpOfEachSamplesMeanEmbedding) {
  const SequenceData data = ShortAndLong();
  SequenceClassifier model({.vocab = 20, .dim = 8, .hidden = {16}, .classes = 4}, /*seed=*/4);
  const TensorList p = model.Parameters();  // embedding, mlp.0.{weight,bias}, mlp.2.{...}
  const Tensor logits = model.Forward(PackBatch(data, {1, 0}));
  for (int64_t row = 0; row < 2; ++row) {
    const int64_t id = 1 - row;
    const Tensor tokens = data.tokens.Rows(data.offsets[id], data.offsets[id + 1]);
    Tensor pooled = Tensor::Zeros({1, 8});
    const Tensor embedded = EmbeddingLookup(p[0], tokens);
    for (int64_t t = 0; t < tokens.numel(); ++t) pooled = pooled + embedded.Rows(t, t + 1);
    pooled = pooled / static_cast<double>(tokens.numel());
    const Tensor expected = Linear(Relu(Linear(pooled, p[1], p[2])), p[3], p[4]);
    EXPECT_TRUE(testing_util::AllClose(logits.Rows(row, row + 1), expected)) << "sample " << id;
  }
}

TEST(SequenceClassifierTest, PaddingLeaksIntoNeitherOutputNorGradients) {
  const SequenceData data = ShortAndLong();
  SequenceClassifier model({.vocab = 20, .dim = 8, .hidden = {16}, .classes = 4}, /*seed=*/4);
  const SampleResult alone = RunShortSample(model, data, {0});
  const SampleResult padded = RunShortSample(model, data, {0, 1});  // 37 padding tokens
  EXPECT_TRUE(testing_util::AllClose(padded.logits, alone.logits));
  const NamedTensors named = model.NamedParameters();
  for (size_t i = 0; i < named.size(); ++i) {
    ASSERT_TRUE(alone.grads[i].defined() && padded.grads[i].defined()) << named[i].first;
    EXPECT_TRUE(testing_util::AllClose(padded.grads[i], alone.grads[i])) << named[i].first;
  }
  // The padding's token 0 is looked up 37 times but gets no gradient.
  const Tensor padding_row = padded.grads[0].Rows(0, 1);
  EXPECT_EQ(padding_row.ToDoubles(), std::vector<double>(8, 0.0));
}

TEST(SequenceClassifierTest, MalformedBatchesAreRejected) {
  SequenceClassifier model({.vocab = 5, .dim = 2, .hidden = {}, .classes = 2}, 0);
  auto error_of = [&](const Tensor& batch) -> std::string {
    try {
      model.Forward(batch);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_THAT(error_of(Tensor::Zeros({2, 3})),
              StartsWith("[SequenceClassifier] expects PackBatch's int64 [b, 1 + L]"));
  EXPECT_THAT(error_of(Int64s({1, 2})), HasSubstr("got int64[2]"));
  EXPECT_THAT(error_of(Int64s({1, 2}).View({2, 1})), HasSubstr("got int64[2, 1]"));
  EXPECT_EQ(error_of(Int64s({2, 1, 1, 0, 3, 3}).View({2, 3})),
            "[SequenceClassifier] batch row 1 has length 0, outside [1, L=2] (column 0 of each "
            "row is the sample's length; build batches with PackBatch)");
  EXPECT_THAT(error_of(Int64s({3, 1, 1}).View({1, 3})), HasSubstr("row 0 has length 3"));
  EXPECT_THAT(error_of(Int64s({1, 9}).View({1, 2})), HasSubstr("[embedding] index 9"));
}

// The model on cuda:0 (the batch on the host or the GPU) against the same model on the host.
TEST(SequenceClassifierTest, SameOnGpu) {
  DDPKIT_REQUIRE_GPU();
  const SequenceData data = ShortAndLong();
  const SequenceModelSpec spec{.vocab = 20, .dim = 8, .hidden = {16}, .classes = 4};
  SequenceClassifier cpu(spec, 4), gpu(spec, 4);
  gpu.To(cuda_testing::kGpu);
  const Tensor batch = PackBatch(data, {0, 1});
  const Tensor expected = cpu.Forward(batch);
  for (const Tensor& input : {batch, PackBatch(data, {0, 1}, cuda_testing::kGpu)}) {
    const Tensor logits = gpu.Forward(input);
    EXPECT_EQ(logits.device(), cuda_testing::kGpu);
    EXPECT_TRUE(cuda_testing::SameValues(logits, expected, 1e-5));
  }
}

}  // namespace
}  // namespace ddpkit::jobs
