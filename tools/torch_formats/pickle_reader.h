// The part of Python's pickle format that PyTorch's flight-recorder dumps are written in: its
// C++ pickler (torch::jit::Pickler, protocol 2) writing a dictionary of dictionaries, lists,
// tuples, strings, integers, floats, booleans and None. Read into JSON values (a tuple becomes a
// list, an integer dictionary key its decimal text), so that both dump forms share one reader.
//
// Only the opcodes such a dump uses are read; any other (a class, a reduce, a persistent id,
// ...) is refused naming its offset and opcode. Memory and depth are bounded: memo copies may
// not grow the values past a few times the input's size, nor nest deeper than kMaxPickleDepth.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace ddpkit::torch_formats {

inline constexpr int kMaxPickleDepth = 32;

// The one value `bytes` pickles, or InvalidArgument ("pickle: ... at offset N") naming why not.
absl::StatusOr<nlohmann::json> ReadTorchPickle(std::string_view bytes);

}  // namespace ddpkit::torch_formats
