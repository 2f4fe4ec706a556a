// The learning rate for a step whose global batch differs from the one the LR was tuned for:
// linear (Goyal et al., 2017: k times the batch, k times the LR) or square root (Krizhevsky,
// 2014: the gradient's noise falls as 1/sqrt(batch)).
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace ddpkit::jobs {

enum class LrScaling { kNone, kLinear, kSqrt };
absl::StatusOr<LrScaling> ParseLrScaling(std::string_view name);
std::string_view LrScalingName(LrScaling scaling);

// lr × 1, × batch / ref_batch, or × sqrt(batch / ref_batch). ref_batch >= 1, batch >= 0.
double ScaledLr(double lr, LrScaling scaling, int64_t batch, int64_t ref_batch);

}  // namespace ddpkit::jobs
