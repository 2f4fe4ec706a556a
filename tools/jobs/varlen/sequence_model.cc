#include "tools/jobs/varlen/sequence_model.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "autograd/ops.h"
#include "autograd/random.h"

namespace ddpkit::jobs {
namespace {

constexpr absl::string_view kPrefix = "seq:";
constexpr char kExpected[] =
    "expected seq:V,D,H1,...,C (vocabulary, embedding width, optional hidden widths, classes), "
    "e.g. seq:512,32,64,8";

absl::Status Invalid(absl::string_view spec, absl::string_view problem) {
  return absl::InvalidArgumentError(StrCat("--model '", spec, "' ", problem, "; ", kExpected));
}

// Bounded like nn::ParseMlpSpec, so no shape or element count overflows int64.
absl::Status CheckParameterCount(absl::string_view spec, const std::vector<int64_t>& widths) {
  int64_t parameters = 0;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    const int64_t in = widths[i], out = widths[i + 1];
    const int64_t bias = i == 0 ? 0 : out;  // the embedding table has no bias
    if (in > nn::kMaxMlpParameters / out || in * out + bias > nn::kMaxMlpParameters - parameters) {
      return Invalid(
          spec, StrCat("has more than ", nn::kMaxMlpParameters, " parameters; use smaller widths"));
    }
    parameters += in * out + bias;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SequenceModelSpec> ParseSequenceModelSpec(const std::string& std_spec) {
  const absl::string_view spec(std_spec);
  if (!absl::StartsWith(spec, kPrefix)) {
    // The zoo's families (mlp:, resnet:, gpt:) name fixed-size inputs; varlen's rows vary.
    return Invalid(spec, absl::StrContains(spec, ':')
                             ? "is not a sequence model varlen runs (its rows vary in length, "
                               "which only its own classifier takes)"
                             : "is not a sequence model");
  }
  std::vector<int64_t> widths;
  for (absl::string_view part : absl::StrSplit(spec.substr(kPrefix.size()), ',')) {
    int64_t width = 0;
    if (!absl::SimpleAtoi(part, &width) || width <= 0) {
      return Invalid(spec, StrCat("has width '", part, "', not a positive integer"));
    }
    widths.push_back(width);
  }
  if (widths.size() < 3) {
    return Invalid(spec, "needs at least a vocabulary, an embedding width and a class count");
  }
  DDPKIT_RETURN_IF_ERROR(CheckParameterCount(spec, widths));
  return SequenceModelSpec{.vocab = widths.front(),
                           .dim = widths[1],
                           .hidden = std::vector<int64_t>(widths.begin() + 2, widths.end() - 1),
                           .classes = widths.back()};
}

SequenceClassifier::SequenceClassifier(const SequenceModelSpec& spec, uint64_t seed) : spec_(spec) {
  Generator gen(seed);  // one stream: the embedding first, then the Linears in order
  embedding_ =
      RegisterModule("embedding", std::make_shared<nn::Embedding>(spec.vocab, spec.dim, gen));
  mlp_ = RegisterModule("mlp", std::make_shared<nn::Sequential>());
  int64_t in = spec.dim;
  for (int64_t out : spec.hidden) {
    mlp_->Append(std::make_shared<nn::Linear>(in, out, /*bias=*/true, gen));
    mlp_->Append(std::make_shared<nn::ReLU>());
    in = out;
  }
  mlp_->Append(std::make_shared<nn::Linear>(in, spec.classes, /*bias=*/true, gen));
}

namespace {

// The batch's lengths (column 0) and tokens (columns 1..L, row-major) on the host, checked.
std::pair<Tensor, Tensor> SplitBatch(const Tensor& batch) {
  DDPKIT_CHECK(batch.defined() && batch.dtype() == DType::kInt64 && batch.dim() == 2 &&
                   batch.size(0) >= 1 && batch.size(1) >= 2,
               "[SequenceClassifier] expects PackBatch's int64 [b, 1 + L] with b >= 1 and L >= 1 "
               "(each row: a length, then the tokens), got ",
               batch.defined() ? StrCat(DTypeName(batch.dtype()), ShapeString(batch.shape()))
                               : std::string("an undefined tensor"));
  const Tensor host = batch.is_cuda() ? batch.To(Device::Cpu()) : batch;
  const int64_t b = host.size(0), seq_len = host.size(1) - 1;
  Tensor lengths = Tensor::Empty({b}, DType::kInt64);
  Tensor tokens = Tensor::Empty({b * seq_len}, DType::kInt64);
  const int64_t* in = host.data<int64_t>();
  for (int64_t i = 0; i < b; ++i) {
    const int64_t* row = in + i * (seq_len + 1);
    DDPKIT_CHECK(row[0] >= 1 && row[0] <= seq_len, "[SequenceClassifier] batch row ", i,
                 " has length ", row[0], ", outside [1, L=", seq_len,
                 "] (column 0 of each row is the sample's length; build batches with PackBatch)");
    lengths.data<int64_t>()[i] = row[0];
    std::copy(row + 1, row + 1 + seq_len, tokens.data<int64_t>() + i * seq_len);
  }
  return {lengths, tokens};
}

}  // namespace

Tensor SequenceClassifier::Forward(const Tensor& batch) {
  auto [lengths, tokens] = SplitBatch(batch);
  const Device device = embedding_->weight().device();
  if (device.is_cuda()) {
    lengths = lengths.To(device);
    tokens = tokens.To(device);
  }
  // Every token is looked up, padding (token 0) included; SequenceMean reads only the first
  // lengths[i] rows of each sample, so the padding reaches neither the output nor a gradient.
  return mlp_->Forward(SequenceMean(embedding_->Forward(tokens), lengths));
}

std::string SequenceClassifier::Describe() const {
  std::vector<int64_t> widths = {spec_.vocab, spec_.dim};
  widths.insert(widths.end(), spec_.hidden.begin(), spec_.hidden.end());
  widths.push_back(spec_.classes);
  return StrCat("SequenceClassifier(seq:", absl::StrJoin(widths, ","), ")");
}

}  // namespace ddpkit::jobs
