#include "comm/spin_wait.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "autograd/base/error.h"
#include "autograd/base/log.h"

namespace ddpkit::comm {
namespace {

constexpr int kDefaultSpinMicros = 100;

std::chrono::nanoseconds ReadBudget() {
  const char* value = std::getenv("DDPKIT_SPIN_US");
  int micros = kDefaultSpinMicros;
  if (value != nullptr && *value != '\0' && (!absl::SimpleAtoi(value, &micros) || micros < 0)) {
    Log(LogLevel::kWarning,
        StrCat("DDPKIT_SPIN_US='", value, "' is not a number of microseconds >= 0; using ",
               kDefaultSpinMicros));
    micros = kDefaultSpinMicros;
  }
  return std::chrono::microseconds(micros);
}

}  // namespace

std::chrono::nanoseconds SpinBudget() {
  static const std::chrono::nanoseconds budget = ReadBudget();
  return budget;
}

}  // namespace ddpkit::comm
