// The model of `ddpkit varlen`: embedding -> mean over each sample's own tokens -> MLP -> class
// logits. It takes a padded batch (PackBatch: int64 [b, 1 + L], each row its length, then its
// tokens, then padding) and reads only the first length tokens of each row, so the padding
// changes neither the output nor any gradient.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "autograd/nn/nn.h"

namespace ddpkit::jobs {

// "seq:V,D,H1,...,C": vocabulary V, embedding width D, hidden widths H1..., classes C.
struct SequenceModelSpec {
  int64_t vocab = 0;
  int64_t dim = 0;
  std::vector<int64_t> hidden;
  int64_t classes = 0;
};
// InvalidArgument naming --model for a malformed spec or a non-positive width.
absl::StatusOr<SequenceModelSpec> ParseSequenceModelSpec(const std::string& spec);

// Parameters "embedding.weight", then "mlp.0.weight", "mlp.0.bias", "mlp.2.weight", ... (an
// nn.Sequential of Linear and ReLU), initialised as PyTorch's defaults from the seed.
class SequenceClassifier : public nn::Module {
 public:
  SequenceClassifier(const SequenceModelSpec& spec, uint64_t seed);
  // batch: int64 [b, 1 + L] (PackBatch) -> logits [b, classes], on the parameters' device.
  Tensor Forward(const Tensor& batch) override;

 private:
  std::string Describe() const override;
  SequenceModelSpec spec_;
  std::shared_ptr<nn::Embedding> embedding_;
  std::shared_ptr<nn::Sequential> mlp_;
};

}  // namespace ddpkit::jobs
