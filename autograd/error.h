// ddpkit's one error style, used by every module.
//
// Two tiers, as in gloo:
//  * Recoverable failures that a caller must handle — files, flags, peers, timeouts — are
//    returned as absl::Status / absl::StatusOr<T> with a canonical code (InvalidArgument for
//    bad input, DataLoss for a malformed file, DeadlineExceeded for a timeout, ...).
//  * Misuse of an API — mismatched shapes, an op on the wrong dtype, an index out of range —
//    throws ddpkit::Error through DDPKIT_CHECK. The message starts with "[op] " (MLX's
//    convention) and says what was expected and what was found.
// Either way the text says what happened, which tensor/parameter/rank, and what to do. The CLI
// turns both into one line on stderr.
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

// Thrown for API misuse (see above). Carries a canonical code so boundaries can convert it
// into an absl::Status without losing the category.
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

// Throws `status` as an Error (used where a Status crosses into exception-based code).
[[noreturn]] void ThrowStatus(const absl::Status& status);

}  // namespace ddpkit

// DDPKIT_CHECK(cond, message parts...): throws ddpkit::Error built with absl::StrCat when
// `cond` is false. The parts are only evaluated on failure.
#define DDPKIT_CHECK(cond, ...)                             \
  do {                                                      \
    if (!(cond)) [[unlikely]] {                             \
      throw ::ddpkit::Error(::ddpkit::StrCat(__VA_ARGS__)); \
    }                                                       \
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
