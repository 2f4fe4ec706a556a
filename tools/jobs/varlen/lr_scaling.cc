#include "tools/jobs/varlen/lr_scaling.h"

#include <cmath>

#include "autograd/base/error.h"

namespace ddpkit::jobs {

absl::StatusOr<LrScaling> ParseLrScaling(std::string_view name) {
  for (LrScaling scaling : {LrScaling::kNone, LrScaling::kLinear, LrScaling::kSqrt}) {
    if (name == LrScalingName(scaling)) return scaling;
  }
  return absl::InvalidArgumentError(
      StrCat("--lr-scaling must be none, linear or sqrt, got '", std::string(name), "'"));
}

std::string_view LrScalingName(LrScaling scaling) {
  switch (scaling) {
    case LrScaling::kNone: return "none";
    case LrScaling::kLinear: return "linear";
    case LrScaling::kSqrt: return "sqrt";
  }
  return "?";
}

double ScaledLr(double lr, LrScaling scaling, int64_t batch, int64_t ref_batch) {
  DDPKIT_CHECK(ref_batch >= 1 && batch >= 0, "[lr scaling] batch ", batch, ", reference ",
               ref_batch);
  const double ratio = static_cast<double>(batch) / static_cast<double>(ref_batch);
  switch (scaling) {
    case LrScaling::kNone: return lr;
    case LrScaling::kLinear: return lr * ratio;
    case LrScaling::kSqrt: return lr * std::sqrt(ratio);
  }
  return lr;
}

}  // namespace ddpkit::jobs
