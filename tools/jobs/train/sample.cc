#include "tools/jobs/train/sample.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/random.h"

namespace ddpkit::jobs {
namespace {

// A token drawn from softmax(logits) with one uniform number.
int64_t Draw(const float* logits, int64_t vocab, double uniform) {
  const float top = *std::max_element(logits, logits + vocab);
  std::vector<double> weights(static_cast<size_t>(vocab));
  double total = 0;
  for (int64_t v = 0; v < vocab; ++v) total += weights[v] = std::exp(logits[v] - top);
  double left = uniform * total;
  for (int64_t v = 0; v < vocab; ++v) {
    if ((left -= weights[v]) < 0) return v;
  }
  return vocab - 1;
}

}  // namespace

std::string SampleText(nn::Module& model, const ClassificationData& data, int64_t context,
                       int64_t characters, uint64_t seed) {
  if (data.vocabulary.empty() || data.rows() == 0) return "";
  NoGradGuard no_grad;
  const TensorList parameters = model.Parameters();
  const Device device = parameters.empty() ? Device::Cpu() : parameters.front().device();
  const auto vocab = static_cast<int64_t>(data.vocabulary.size());
  Generator generator(seed);
  std::vector<int64_t> tokens = {data.x.data<int64_t>()[0]};
  for (int64_t i = 0; i < characters; ++i) {
    const int64_t length = std::min<int64_t>(context, static_cast<int64_t>(tokens.size()));
    Tensor input = Tensor::FromVector<int64_t>(
        std::vector<int64_t>(tokens.end() - length, tokens.end()), {1, length});
    const Tensor logits = model.Forward(input.To(device)).To(Device::Cpu());  // [1, T, classes]
    const float* last = logits.data<float>() + (length - 1) * logits.size(2);
    tokens.push_back(Draw(last, vocab, generator.Uniform()));  // only the text's characters
  }
  std::string text;
  for (int64_t token : tokens) text += data.vocabulary[token];
  return text;
}

}  // namespace ddpkit::jobs
