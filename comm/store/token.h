// The store's shared secret: `ddpkit launch` draws one per job and hands it to its ranks as
// DDPKIT_STORE_TOKEN; every store connection presents it first, and a server that has one
// admits only connections that present the same (comm/store/tcp_store.h).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace ddpkit::comm {

inline constexpr char kStoreTokenEnv[] = "DDPKIT_STORE_TOKEN";

// 256 bits from the kernel's random source (getrandom(2)), as 64 lowercase hex digits.
absl::StatusOr<std::string> NewStoreToken();

// Whether `given` equals `expected`, in time that depends only on expected's length, so a peer
// cannot learn the token a byte at a time by timing rejections.
bool TokensEqual(std::string_view expected, std::string_view given);

}  // namespace ddpkit::comm
