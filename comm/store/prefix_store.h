// A view of a store with every key under a prefix (comm/store/store.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/store/store.h"

namespace ddpkit::comm {

// A view of a store with every key under `prefix`: each round-robin group after the first
// rendezvouses (and records its failures) in its own namespace, so their keys do not clash.
class PrefixStore final : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> store, std::string prefix)
      : store_(std::move(store)), prefix_(std::move(prefix)) {}
  absl::Status Set(const std::string& key, const std::string& value,
                   absl::Duration reply_timeout) override {
    return store_->Set(prefix_ + key, value, reply_timeout);
  }
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
    return store_->Get(prefix_ + key, timeout);
  }
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta,
                              absl::Duration reply_timeout) override {
    return store_->Add(prefix_ + key, delta, reply_timeout);
  }
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override {
    return store_->Wait(Prefixed(keys), timeout);
  }
  absl::StatusOr<bool> Check(const std::vector<std::string>& keys,
                             absl::Duration reply_timeout) override {
    return store_->Check(Prefixed(keys), reply_timeout);
  }

 private:
  std::vector<std::string> Prefixed(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    for (const std::string& k : keys) out.push_back(prefix_ + k);
    return out;
  }
  std::shared_ptr<Store> store_;
  std::string prefix_;
};

}  // namespace ddpkit::comm
