// Store: the key-value service ranks rendezvous through (PyTorch's c10d Store, Gloo's
// rendezvous::Store). Every blocking call takes a timeout and fails with DeadlineExceeded
// naming the keys it waited for. Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ddpkit::comm {

// How long a call that does not wait for keys (set, add, check) waits for the store's reply
// by default. A healthy store answers in microseconds; a caller on a deadline (a failure's
// diagnosis, shutting down) passes less, so a stuck store host cannot stretch its deadline.
inline constexpr absl::Duration kStoreReplyTimeout = absl::Seconds(10);

class Store {
 public:
  virtual ~Store() = default;
  virtual absl::Status Set(const std::string& key, const std::string& value,
                           absl::Duration reply_timeout = kStoreReplyTimeout) = 0;
  // Waits until `key` exists, then returns its value.
  virtual absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) = 0;
  // Adds `delta` to the integer at `key` (0 when absent) and returns the sum.
  virtual absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta,
                                      absl::Duration reply_timeout = kStoreReplyTimeout) = 0;
  virtual absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) = 0;
  virtual absl::StatusOr<bool> Check(const std::vector<std::string>& keys,
                                     absl::Duration reply_timeout = kStoreReplyTimeout) = 0;
};

}  // namespace ddpkit::comm
