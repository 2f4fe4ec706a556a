// The reducer's diagnoses of misuse and of failed collectives, kept together so their wording
// stays consistent. Each says what happened, which parameter (index and name) and on which
// rank, and what to do.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace ddpkit::reducer {

struct ParamRef {
  size_t index;
  std::string name;
};

// A parameter's hook fired a second time in one synced backward.
std::string MarkedTwiceMessage(int rank, const ParamRef& param);

// The previous synced backward ended without every parameter getting a gradient; raised at
// the next forward. `missing`: the parameters never marked ready, ascending.
std::string PriorReductionNotFinishedMessage(int rank, const std::vector<ParamRef>& missing,
                                             bool find_unused_parameters, bool static_graph);

// Under static_graph, a parameter's hook fired more often than in the first iteration.
std::string StaticGraphChangedMessage(int rank, const ParamRef& param, int expected_count);

// A collective that failed (a timeout, a dead peer): "[<op>] rank R: <what> failed: " and the
// comm layer's diagnosis, keeping `status`'s code.
absl::Status CommFailure(int rank, std::string_view what, const absl::Status& status,
                         std::string_view op = "ddp");
// The same, thrown (tier 4 of autograd/error.h): for code that runs inside backward (the
// reducer's hooks and finalize) or in an override that cannot return a Status (DDP's Forward,
// its join hook, ZeRO's Step). RunOnEveryRank turns it back into a Status.
[[noreturn]] void ThrowCommFailure(int rank, std::string_view what, const absl::Status& status,
                                   std::string_view op = "ddp");

}  // namespace ddpkit::reducer
