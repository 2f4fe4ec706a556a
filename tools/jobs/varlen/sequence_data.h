// The data of `ddpkit varlen`: samples of different lengths (token sequences) with a class label
// each — a seeded synthetic task, or pre-tokenised data from a safetensors file. Every rank
// holds the whole dataset, as each rank of a PyTorch job can index the whole Dataset; what the
// ranks sort and deal out is which sample ids each one trains on (tools/jobs/varlen/).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "autograd/tensor.h"

namespace ddpkit::jobs {

struct SequenceData {
  Tensor tokens;                 // int64 [T]: every sample's tokens back to back
  Tensor lengths;                // int64 [N], each >= 1
  Tensor labels;                 // int64 [N], each in [0, classes)
  std::vector<int64_t> offsets;  // [N + 1]: sample i is tokens[offsets[i], offsets[i + 1])
  int64_t vocab = 0;             // every token is in [0, vocab)
  int64_t classes = 0;
  std::string description;  // for reports: "synthetic (...)" or the path
  int64_t samples() const { return lengths.defined() ? lengths.numel() : 0; }
  int64_t length(int64_t id) const { return offsets[id + 1] - offsets[id]; }
};

struct SyntheticSequenceOptions {
  int64_t samples = 4096;
  int64_t vocab = 512;
  int64_t classes = 8;
  int64_t min_length = 4;
  int64_t max_length = 256;
  uint64_t seed = 0;
};

// Lengths from a log-normal clipped to [min_length, max_length]: many short samples (the median
// a quarter of the way up on a log scale) and a long tail reaching max_length, as sentences or
// utterances; tokens uniform in [0, vocab). A sample's label is the class c whose tokens
// (id % classes == c) it holds most of (ties: the lowest c), so the label depends on every token
// and a bag-of-embeddings model can learn it. The options (seed included) fix the data on every
// machine. Throws unless samples, vocab and classes are >= 1 and 1 <= min_length <= max_length.
SequenceData MakeSyntheticSequences(const SyntheticSequenceOptions& options);

// Reads 1-D int64 tensors `tokens` [T], `lengths` [N] and `labels` [N], onto the host: N >= 1,
// lengths >= 1 summing to T, tokens in [0, vocab), labels in [0, classes). A file that cannot be
// read or parsed is ReadSafetensors' error; contents that break a rule are an InvalidArgument
// naming the file, the tensor and the first bad sample (or token position), and what to do.
absl::StatusOr<SequenceData> LoadSequenceData(const std::string& path, int64_t vocab,
                                              int64_t classes);

// The samples `ids` as one padded batch: int64 [b, 1 + L] on `device`, L the longest of them;
// row i holds sample ids[i]'s length, then its tokens, then zeros (token 0, which the model never
// reads past a row's length). This is the one tensor SequenceClassifier (and DDP around it)
// takes. Built on the host, then copied to `device`; an id outside the data throws.
Tensor PackBatch(const SequenceData& data, const std::vector<int64_t>& ids,
                 Device device = Device::Cpu());
// Their labels: int64 [b] on `device`.
Tensor BatchLabels(const SequenceData& data, const std::vector<int64_t>& ids,
                   Device device = Device::Cpu());

}  // namespace ddpkit::jobs
