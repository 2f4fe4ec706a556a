// The reducer's diagnoses of misuse, kept together so their wording stays consistent. Each
// says what happened, which parameter (index and name) and on which rank, and what to do.
#pragma once

#include <string>
#include <vector>

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

}  // namespace ddpkit::reducer
