// ddpkit's one error policy, used by every module. Four tiers, each named by what goes wrong:
//
//  1. Bad input from outside the program — flags, files, environment variables, peers that fail
//     or disagree, timeouts — is returned as absl::Status / absl::StatusOr<T> by the function
//     that can fail that way, with a canonical code (InvalidArgument for bad input, DataLoss for
//     a malformed file, DeadlineExceeded for a timeout, ...).
//  2. Misuse of an API by its caller — mismatched shapes, an op on the wrong dtype, an index out
//     of range, a call out of order — throws ddpkit::Error through DDPKIT_CHECK (code
//     InvalidArgument), or `throw Error(message, code)` where a more specific code fits
//     (FailedPrecondition for a parameter marked ready twice). The message starts with "[op] "
//     (MLX's convention) and says what was expected and what was found.
//  3. ddpkit's own invariants — conditions that no input and no caller can break, only a bug in
//     ddpkit — are checked with DDPKIT_INTERNAL_CHECK (gloo's ENFORCE, c10d's
//     INTERNAL_ASSERT): it throws Error with code Internal, and the message says it is a bug.
//  4. A Status that must cross code that cannot return one is thrown with ThrowStatus, keeping
//     its code. This happens where a tier-1 failure (a collective that timed out, a peer that
//     died) is found inside a call whose signature has no room for a Status: the reducer's
//     autograd hooks and end-of-backward callback run inside Tensor::Backward; DDP's Forward,
//     the join hooks, ZeroRedundancyOptimizer::Step and the PowerSGD hook are Module /
//     Optimizer / JoinHook / CommHook overrides; an op that finds its GPU unusable. The reducer
//     prefixes the message with the rank and what it was doing (ThrowCommFailure,
//     reducer/reducer_errors.h). It is caught back into a Status at the job boundary:
//     RunOnEveryRank (tools/jobs/job.h) turns an Error thrown on a rank into that rank's Status;
//     comm::RunOnWorld's threads world does the same for any body; a Future's continuation
//     (comm/future.h) and a collective's execution (ProcessGroup::RunOne) report one on their
//     Work. DistributedDataParallel::Create catches the Reducer constructor's tier-2 throws into
//     its StatusOr.
// Either way the text says what happened, which tensor/parameter/rank, and what to do. The CLI
// turns every tier into one line on stderr.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace ddpkit {

namespace internal {
// Debian 12's Abseil has its own string_view type, which absl::StrCat takes and
// std::string_view is not converted to; this adapts the one to the other.
template <typename T>
decltype(auto) AsAlphaNum(const T& value) {
  if constexpr (std::is_same_v<T, std::string_view>) {
    return absl::string_view(value.data(), value.size());
  } else {
    return (value);
  }
}
}  // namespace internal

// absl::StrCat that also accepts std::string_view.
template <typename... Parts>
std::string StrCat(const Parts&... parts) {
  return absl::StrCat(internal::AsAlphaNum(parts)...);
}

// absl::StrAppend that also accepts std::string_view.
template <typename... Parts>
void StrAppend(std::string* out, const Parts&... parts) {
  absl::StrAppend(out, internal::AsAlphaNum(parts)...);
}

// Thrown for tiers 2-4 above. Carries a canonical code so boundaries can convert it into an
// absl::Status without losing the category.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message,
                 absl::StatusCode code = absl::StatusCode::kInvalidArgument)
      : std::runtime_error(message), code_(code) {}
  absl::StatusCode code() const { return code_; }
  absl::Status ToStatus() const { return absl::Status(code_, what()); }

 private:
  absl::StatusCode code_;
};

// Throws `status` as an Error with its code and message (tier 4). `status` must not be OK.
[[noreturn]] void ThrowStatus(const absl::Status& status);

// The message DDPKIT_INTERNAL_CHECK throws with code Internal: "[ddpkit bug] <file>:<line>:
// <message> (an invariant of ddpkit itself broke; please report it)".
std::string InternalCheckMessage(std::string_view file, int line, std::string_view message);

}  // namespace ddpkit

// DDPKIT_CHECK(cond, message parts...): throws ddpkit::Error built with absl::StrCat when
// `cond` is false. The parts are only evaluated on failure.
#define DDPKIT_CHECK(cond, ...)                             \
  do {                                                      \
    if (!(cond)) [[unlikely]] {                             \
      throw ::ddpkit::Error(::ddpkit::StrCat(__VA_ARGS__)); \
    }                                                       \
  } while (false)

// DDPKIT_INTERNAL_CHECK(cond, message parts...): ddpkit's own invariant (tier 3). Throws
// ddpkit::Error with code Internal, the message naming the file and line and saying it is a
// ddpkit bug. Never use it for anything a caller or an input can cause.
#define DDPKIT_INTERNAL_CHECK(cond, ...)                                                     \
  do {                                                                                       \
    if (!(cond)) [[unlikely]] {                                                              \
      throw ::ddpkit::Error(                                                                 \
          ::ddpkit::InternalCheckMessage(__FILE__, __LINE__, ::ddpkit::StrCat(__VA_ARGS__)), \
          ::absl::StatusCode::kInternal);                                                    \
    }                                                                                        \
  } while (false)

// Debian 12's Abseil predates its status macros; these two are all the project needs.
#define DDPKIT_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status ddpkit_status_ = (expr);          \
    if (!ddpkit_status_.ok()) return ddpkit_status_; \
  } while (false)

#define DDPKIT_STATUS_CONCAT_INNER_(a, b) a##b
#define DDPKIT_STATUS_CONCAT_(a, b) DDPKIT_STATUS_CONCAT_INNER_(a, b)
#define DDPKIT_ASSIGN_OR_RETURN(lhs, expr) \
  DDPKIT_ASSIGN_OR_RETURN_IMPL_(DDPKIT_STATUS_CONCAT_(ddpkit_statusor_, __LINE__), lhs, expr)
#define DDPKIT_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()
