// Text a trained language model writes: what `ddpkit train --text` prints after its last step,
// so a reader sees the falling loss become words.
#pragma once

#include <cstdint>
#include <string>

#include "autograd/nn/nn.h"
#include "tools/jobs/dataset.h"

namespace ddpkit::jobs {

// `characters` characters sampled one at a time (softmax at temperature 1, seeded) from the
// model's last-position logits, each step seeing at most the last `context` characters, starting
// from the data's first character. Empty when the data has no vocabulary (not a text file).
std::string SampleText(nn::Module& model, const ClassificationData& data, int64_t context,
                       int64_t characters, uint64_t seed);

}  // namespace ddpkit::jobs
