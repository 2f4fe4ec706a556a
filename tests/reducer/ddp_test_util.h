// Helpers for the DDP tests: run a body on an in-process world and compare gradients with a
// single process that sees every rank's rows.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "autograd/nn/nn.h"
#include "autograd/ops.h"
#include "comm/threads/threads_world.h"
#include "gtest/gtest.h"
#include "reducer/distributed_data_parallel.h"

namespace ddpkit::reducer::testing {

using Grads = std::map<std::string, std::vector<double>>;  // name -> values (absent: no .grad)

inline Grads GradsOf(const nn::Module& module) {
  Grads grads;
  for (const auto& [name, p] : module.NamedParameters()) {
    if (p.grad().defined()) grads[name] = p.grad().ToDoubles();
  }
  return grads;
}

// Runs body(group) on `world` rank threads; fails the test with the world's error.
inline void RunWorld(int world, const std::function<void(comm::ProcessGroup&)>& body) {
  absl::Status status = comm::RunThreadsWorld(world,
                                              [&](comm::ProcessGroup& group) {
                                                body(group);
                                                return absl::OkStatus();
                                              },
                                              {.timeout = absl::Seconds(60)});
  ASSERT_TRUE(status.ok()) << status;
}

// The error a world ended with (OK when every rank succeeded).
inline absl::Status RunWorldStatus(int world, const std::function<void(comm::ProcessGroup&)>& body,
                                   absl::Duration timeout = absl::Seconds(60)) {
  return comm::RunThreadsWorld(world,
                               [&](comm::ProcessGroup& group) {
                                 body(group);
                                 return absl::OkStatus();
                               },
                               {.timeout = timeout});
}

inline std::shared_ptr<DistributedDataParallel> MakeDdp(std::shared_ptr<nn::Module> module,
                                                        comm::ProcessGroup& group,
                                                        DdpOptions options = {}) {
  absl::StatusOr<std::shared_ptr<DistributedDataParallel>> ddp =
      DistributedDataParallel::Create(std::move(module), group, options);
  if (!ddp.ok()) ThrowStatus(ddp.status());
  return *ddp;
}

// Element-wise closeness of two gradient sets (same names, same sizes).
inline ::testing::AssertionResult GradsClose(const Grads& actual, const Grads& expected,
                                             double rtol, double atol) {
  if (actual.size() != expected.size()) {
    std::string a, e;
    for (const auto& [n, v] : actual) a += n + " ";
    for (const auto& [n, v] : expected) e += n + " ";
    return ::testing::AssertionFailure() << "gradients defined for {" << a << "} vs {" << e << "}";
  }
  for (const auto& [name, values] : expected) {
    auto it = actual.find(name);
    if (it == actual.end()) return ::testing::AssertionFailure() << "no gradient for " << name;
    if (it->second.size() != values.size())
      return ::testing::AssertionFailure() << name << ": sizes differ";
    for (size_t i = 0; i < values.size(); ++i) {
      if (!(std::fabs(it->second[i] - values[i]) <= atol + rtol * std::fabs(values[i]))) {
        return ::testing::AssertionFailure()
               << name << "[" << i << "]: " << it->second[i] << " vs expected " << values[i];
      }
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace ddpkit::reducer::testing
