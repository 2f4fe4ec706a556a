#include "comm/store/token.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "autograd/base/error.h"

namespace ddpkit::comm {

absl::StatusOr<std::string> NewStoreToken() {
  unsigned char bytes[32];
  size_t done = 0;
  while (done < sizeof(bytes)) {
    const ssize_t n = ::getrandom(bytes + done, sizeof(bytes) - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::UnavailableError(
          StrCat("cannot draw a store token: getrandom failed: ", std::strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  for (unsigned char b : bytes) {
    token.push_back(kHex[b >> 4]);
    token.push_back(kHex[b & 0xf]);
  }
  return token;
}

bool TokensEqual(std::string_view expected, std::string_view given) {
  // No early exit: every byte of `expected` is compared whatever differs first. (No OpenSSL
  // here for CRYPTO_memcmp; volatile keeps the compiler from reintroducing a branch.)
  volatile unsigned char diff = expected.size() == given.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff = diff | (static_cast<unsigned char>(expected[i]) ^ g);
  }
  return diff == 0;
}

}  // namespace ddpkit::comm
