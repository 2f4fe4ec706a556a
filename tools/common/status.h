// The wording every tools library shares: a collective's failure with what it was for, and
// a bad flag value, returned before any rank starts. The jobs re-export these (job.h); a
// library below the jobs (checkpoint/) uses them from here.
#pragma once

#include <initializer_list>
#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "comm/work.h"

namespace ddpkit::common {

// Waits for `work`; a failure comes back as "<what> failed: " and the comm layer's diagnosis
// (the op, its sequence number, the ranks that did not arrive).
absl::Status WaitFor(const std::shared_ptr<comm::Work>& work, std::string_view what);

// "--batch-size must be positive, got 0".
absl::Status RequirePositive(std::string_view flag, double value);
// "--steps must be >= 0, got -1".
absl::Status RequireAtLeast(std::string_view flag, double value, double least);
// "--optimizer must be sgd or zero-sgd, got 'adam'".
absl::Status RequireOneOf(std::string_view flag, std::string_view value,
                          std::initializer_list<std::string_view> allowed);

}  // namespace ddpkit::common
