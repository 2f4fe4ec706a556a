#include "tools/jobs/varlen/sequence_data.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "autograd/nn/safetensors.h"
#include "autograd/random.h"

namespace ddpkit::jobs {
namespace {

// Log-normal lengths clipped to [lo, hi]. With R = log(hi / lo), the median sits a quarter of
// the way up on a log scale (mu = log(lo) + R / 4) and sigma = R / 4 puts hi three sigmas above
// it: most samples are short, about one in 740 reaches hi, and lo catches the 16% below it.
std::vector<int64_t> LogNormalLengths(int64_t samples, int64_t lo, int64_t hi, Generator& gen) {
  const double range = std::log(static_cast<double>(hi) / static_cast<double>(lo));
  const double mu = std::log(static_cast<double>(lo)) + range / 4, sigma = range / 4;
  std::vector<int64_t> lengths(samples);
  for (int64_t& length : lengths) {
    const double drawn = std::exp(mu + sigma * gen.Normal());
    length = std::llround(std::clamp(drawn, static_cast<double>(lo), static_cast<double>(hi)));
  }
  return lengths;
}

// The class c whose tokens (id % classes == c) the sample holds most of; ties: the lowest c.
int64_t MajorityClass(const int64_t* tokens, int64_t length, int64_t classes) {
  std::vector<int64_t> counts(classes, 0);
  for (int64_t t = 0; t < length; ++t) ++counts[tokens[t] % classes];
  return std::max_element(counts.begin(), counts.end()) - counts.begin();
}

std::vector<int64_t> OffsetsOf(const int64_t* lengths, int64_t samples) {
  std::vector<int64_t> offsets(samples + 1, 0);
  for (int64_t i = 0; i < samples; ++i) offsets[i + 1] = offsets[i] + lengths[i];
  return offsets;
}

}  // namespace

SequenceData MakeSyntheticSequences(const SyntheticSequenceOptions& options) {
  DDPKIT_CHECK(options.samples >= 1 && options.vocab >= 1 && options.classes >= 1,
               "[MakeSyntheticSequences] samples, vocab and classes must be >= 1, got ",
               options.samples, ", ", options.vocab, ", ", options.classes);
  DDPKIT_CHECK(options.min_length >= 1 && options.min_length <= options.max_length,
               "[MakeSyntheticSequences] lengths must satisfy 1 <= min <= max, got [",
               options.min_length, ", ", options.max_length, "]");
  Generator gen(options.seed);
  // Every length first, then the tokens: the lengths depend only on the count, the range and
  // the seed, not on the vocabulary.
  const std::vector<int64_t> lengths =
      LogNormalLengths(options.samples, options.min_length, options.max_length, gen);
  SequenceData data;
  data.offsets = OffsetsOf(lengths.data(), options.samples);
  data.lengths = Tensor::FromVector<int64_t>(lengths, {options.samples});
  data.tokens = Tensor::Empty({data.offsets.back()}, DType::kInt64);
  data.labels = Tensor::Empty({options.samples}, DType::kInt64);
  int64_t* tokens = data.tokens.data<int64_t>();
  const auto vocab = static_cast<uint64_t>(options.vocab);
  for (int64_t t = 0; t < data.tokens.numel(); ++t) {
    tokens[t] = static_cast<int64_t>(gen.NextU64() % vocab);
  }
  for (int64_t i = 0; i < options.samples; ++i) {
    data.labels.data<int64_t>()[i] =
        MajorityClass(tokens + data.offsets[i], lengths[i], options.classes);
  }
  data.vocab = options.vocab;
  data.classes = options.classes;
  data.description = StrCat("synthetic (", options.samples, " samples, lengths ",
                            options.min_length, "..", options.max_length, ", vocab ", options.vocab,
                            ", ", options.classes, " classes, seed ", options.seed, ")");
  return data;
}

namespace {

// The checks of LoadSequenceData past the tensors' presence, dtypes and shapes; `invalid`
// prefixes the path.
template <typename Invalid>
absl::Status CheckContents(const Tensor& tokens, const Tensor& lengths, const Tensor& labels,
                           int64_t vocab, int64_t classes, const Invalid& invalid) {
  const int64_t n = lengths.numel(), total = tokens.numel();
  const int64_t* len = lengths.data<int64_t>();
  int64_t end = 0;  // where the samples so far end in 'tokens'
  for (int64_t i = 0; i < n; ++i) {
    if (len[i] < 1) {
      return invalid("tensor 'lengths' sample ", i, " has length ", len[i],
                     "; every sample needs at least one token (drop empty samples)");
    }
    if (len[i] > total - end) {
      return invalid("tensor 'lengths' sample ", i, " (length ", len[i], ") ends past the ", total,
                     " tokens of 'tokens'; the lengths must sum to the token count");
    }
    end += len[i];
  }
  if (end != total) {
    return invalid("tensor 'lengths' sums to ", end, " but 'tokens' holds ", total,
                   " tokens; the lengths must sum to the token count");
  }
  const int64_t* tok = tokens.data<int64_t>();
  for (int64_t t = 0, sample = 0, sample_end = len[0]; t < total; ++t) {
    while (t >= sample_end) sample_end += len[++sample];
    if (tok[t] < 0 || tok[t] >= vocab) {
      return invalid("tensor 'tokens' position ", t, " (sample ", sample, ") has token ", tok[t],
                     ", outside the model's vocabulary [0, ", vocab,
                     "); raise V in --model seq:V,... or re-tokenise");
    }
  }
  const int64_t* label = labels.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    if (label[i] < 0 || label[i] >= classes) {
      return invalid("tensor 'labels' sample ", i, " has label ", label[i],
                     ", outside the model's ", classes, " classes [0, ", classes,
                     "); raise C in --model seq:...,C or fix the labels");
    }
  }
  return absl::OkStatus();
}

// The file's 1-D int64 tensor `name`, or the error saying what a sequence file holds.
absl::StatusOr<Tensor> Int64Vector(const SafetensorsFile& file, const std::string& path,
                                   std::string_view name) {
  const Tensor* t = file.Find(name);
  if (t == nullptr) {
    return absl::InvalidArgumentError(
        StrCat(path, ": has no tensor '", name,
               "'; a sequence file needs int64 tensors 'tokens' [T], 'lengths' [N] and "
               "'labels' [N]"));
  }
  if (t->dtype() != DType::kInt64 || t->dim() != 1) {
    return absl::InvalidArgumentError(StrCat(path, ": tensor '", name,
                                             "' must be int64 and 1-D, got ", DTypeName(t->dtype()),
                                             ShapeString(t->shape())));
  }
  return *t;
}

}  // namespace

absl::StatusOr<SequenceData> LoadSequenceData(const std::string& path, int64_t vocab,
                                              int64_t classes) {
  absl::StatusOr<SafetensorsFile> file = ReadSafetensors(path);
  if (!file.ok()) return file.status();
  auto invalid = [&](auto&&... parts) {
    return absl::InvalidArgumentError(StrCat(path, ": ", parts...));
  };
  DDPKIT_ASSIGN_OR_RETURN(const Tensor tokens, Int64Vector(*file, path, "tokens"));
  DDPKIT_ASSIGN_OR_RETURN(const Tensor lengths, Int64Vector(*file, path, "lengths"));
  DDPKIT_ASSIGN_OR_RETURN(const Tensor labels, Int64Vector(*file, path, "labels"));
  if (lengths.numel() == 0) {
    return invalid("tensor 'lengths' holds no samples: there is nothing to train on");
  }
  if (labels.numel() != lengths.numel()) {
    return invalid("tensor 'labels' has ", labels.numel(), " entries but 'lengths' has ",
                   lengths.numel(), "; each sample needs one label");
  }
  DDPKIT_RETURN_IF_ERROR(CheckContents(tokens, lengths, labels, vocab, classes, invalid));
  SequenceData data;
  data.tokens = tokens;
  data.lengths = lengths;
  data.labels = labels;
  data.offsets = OffsetsOf(lengths.data<int64_t>(), lengths.numel());
  data.vocab = vocab;
  data.classes = classes;
  data.description = path;
  return data;
}

namespace {

void CheckIds(const SequenceData& data, const std::vector<int64_t>& ids, std::string_view what) {
  for (size_t i = 0; i < ids.size(); ++i) {
    DDPKIT_CHECK(ids[i] >= 0 && ids[i] < data.samples(), "[", what, "] ids[", i, "] = ", ids[i],
                 " is not a sample id: the data holds ", data.samples(), " samples");
  }
}

Tensor OnDevice(const Tensor& host, Device device) {
  return device.is_cuda() ? host.To(device) : host;
}

}  // namespace

Tensor PackBatch(const SequenceData& data, const std::vector<int64_t>& ids, Device device) {
  CheckIds(data, ids, "PackBatch");
  int64_t longest = 0;
  for (int64_t id : ids) longest = std::max(longest, data.length(id));
  const int64_t b = std::ssize(ids), cols = 1 + longest;
  Tensor batch = Tensor::Zeros({b, cols}, DType::kInt64);  // the padding: zeros
  const int64_t* tokens = data.tokens.data<int64_t>();
  int64_t* out = batch.data<int64_t>();
  for (int64_t i = 0; i < b; ++i) {
    const int64_t id = ids[i];
    out[i * cols] = data.length(id);
    std::copy(tokens + data.offsets[id], tokens + data.offsets[id + 1], out + i * cols + 1);
  }
  return OnDevice(batch, device);
}

Tensor BatchLabels(const SequenceData& data, const std::vector<int64_t>& ids, Device device) {
  CheckIds(data, ids, "BatchLabels");
  Tensor labels = Tensor::Empty({std::ssize(ids)}, DType::kInt64);
  for (size_t i = 0; i < ids.size(); ++i) {
    labels.data<int64_t>()[i] = data.labels.data<int64_t>()[ids[i]];
  }
  return OnDevice(labels, device);
}

}  // namespace ddpkit::jobs
